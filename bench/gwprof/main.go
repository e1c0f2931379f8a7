// Command gwprof runs the gateway in-process, as `llmgate serve -c FILE`
// does, with a CPU (and optionally allocation) profile written when it is
// interrupted: load it with wrk, then `go tool pprof -top gwprof cpu.prof`
// shows where a request's CPU goes in the gateway alone.
// Usage: go run ./bench/gwprof -c llmgate.yaml -cpuprofile cpu.prof
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"syscall"

	"llmgate/internal/config"
	"llmgate/internal/gateway"
	"llmgate/internal/gctune"
	"llmgate/internal/logging"
)

func main() {
	cfgPath := flag.String("c", "", "config file")
	cpu := flag.String("cpuprofile", "cpu.prof", "CPU profile written on interrupt")
	mem := flag.String("memprofile", "", "allocation profile written on interrupt")
	traceOut := flag.String("trace", "", "execution trace written until interrupt (go tool trace -pprof=sched FILE: where goroutines wait for a thread)")
	flag.Parse()
	if *traceOut != "" {
		tf, err := os.Create(*traceOut)
		if err == nil {
			err = trace.Start(tf)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "gwprof:", err)
			os.Exit(1)
		}
		defer func() { trace.Stop(); tf.Close() }()
	}
	if err := run(*cfgPath, *cpu, *mem); err != nil {
		fmt.Fprintln(os.Stderr, "gwprof:", err)
		os.Exit(1)
	}
}

func run(cfgPath, cpu, mem string) error {
	fh, err := os.Open(cfgPath)
	if err != nil {
		return err
	}
	cfg, err := config.Load(fh, cfgPath)
	fh.Close()
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer gctune.Start(0).Stop() // as llmgate serve does
	lg := logging.New(os.Stderr, false, 0)
	defer lg.Close()
	g, err := gateway.Start(ctx, gateway.Options{Config: cfg, Logger: lg.Logger})
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "listening on", g.URL())
	pf, err := os.Create(cpu)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		return err
	}
	if mem != "" {
		runtime.MemProfileRate = 4096
	}
	<-ctx.Done()
	pprof.StopCPUProfile()
	pf.Close()
	if mem != "" {
		mf, err := os.Create(mem)
		if err != nil {
			return err
		}
		_ = pprof.Lookup("allocs").WriteTo(mf, 0)
		mf.Close()
	}
	return g.Close(context.Background())
}
