package main

import (
	"context"
	"errors"
	"io"
)

// runDemo starts simulated engines behind a gateway. It lands with the
// simulator.
func runDemo(ctx context.Context, f serveFlags, out io.Writer) error {
	return errors.New("--demo needs the simulator, which is not built yet")
}
