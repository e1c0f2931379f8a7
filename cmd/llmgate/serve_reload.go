package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/gateway"
)

// configPollInterval is how often serve checks the config file for changes.
const configPollInterval = time.Second

// watchConfig reloads the config file on SIGHUP and when it changes. The
// --listen and --database flags keep overriding the file after a reload.
func watchConfig(ctx context.Context, g *gateway.Gateway, f serveFlags, cfg *config.Config, log *slog.Logger) {
	path := f.config
	if path == "" {
		path = os.Getenv("LLMGATE_CONFIG")
	}
	if path == "" {
		return
	}
	// The routing table logs breaker and health changes; send them where
	// the rest of serve's log goes.
	slog.SetDefault(log)
	r := gateway.NewReloader(g, path, cfg)
	r.Adjust = func(c *config.Config) {
		if f.listen != "" {
			c.Listen = f.listen
		}
		if f.database != "" {
			c.Database = f.database
		}
	}
	r.Watch(ctx, configPollInterval)
	log.Info("watching the config file: edit it or send SIGHUP to reload", "file", path)
}
