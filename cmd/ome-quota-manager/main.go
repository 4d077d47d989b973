// Command ome-quota-manager divides a cluster's accelerators among teams as
// a tree of AcceleratorQuota budgets and enforces it through Kueue. This
// file is wiring only: flags, logs, signals; the work is in package manager.
// Its two subcommands, replay and record, are picked by the first
// argument, and each parses a pflag set of its own, as the manager does;
// cobra, which kubectl-ome uses, would add a layer and remove no code.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"

	"ome.io/quota-manager/manager"
	"ome.io/quota-manager/manager/plane"
	"ome.io/quota-manager/replay"
	"ome.io/quota-manager/webhook"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "replay" {
		return replay.Main(args[1:], os.Stdout, os.Stderr)
	}
	opts := manager.DefaultOptions()
	wopts := webhook.DefaultOptions()
	name := "ome-quota-manager"
	if len(args) > 0 && args[0] == "record" {
		// Informers only, into --event-log: the manager's flags that say
		// what to read and how to measure apply; nothing is written.
		args, name = args[1:], "ome-quota-manager record"
		opts.Record, opts.Mode, opts.LeaderElect = true, manager.ModeWorkload, false
		opts.MetricsAddr, opts.HealthAddr = "0", "0"
		wopts.Enabled = false
	}
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	opts.AddFlags(fs)
	if !opts.Record {
		wopts.AddFlags(fs)
	}
	// -v, --vmodule and --logging-format (text, or json for structured
	// logs), from Kubernetes' own logging options.
	logCfg := logsapi.NewLoggingConfiguration()
	logsapi.AddFlags(logCfg, fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "ome-quota-manager:", err)
		return 2
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "ome-quota-manager:", err)
		return 2
	}
	if opts.Record && opts.EventLog == "" {
		fmt.Fprintln(os.Stderr, "ome-quota-manager record: --event-log is required: the folder to record into")
		return 2
	}
	if err := wopts.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "ome-quota-manager:", err)
		return 2
	}
	if err := logsapi.ValidateAndApply(logCfg, nil); err != nil {
		fmt.Fprintln(os.Stderr, "ome-quota-manager: --logging-format and the other logging flags:", err)
		return 2
	}
	defer klog.Flush()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := klog.Background()
	ctx = klog.NewContext(ctx, logger)

	cfg, err := manager.RestConfig(opts)
	if err != nil {
		logger.Error(err, "cannot reach the API server")
		return 1
	}
	// The one place that picks the mode's implementation.
	build := manager.New
	if opts.Mode == manager.ModeManagement {
		build = plane.New
	}
	m, err := build(opts, cfg)
	if err != nil {
		logger.Error(err, "cannot build the manager")
		return 1
	}
	// The manager and the webhook run side by side; the first to fail
	// stops both.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 2)
	running := 1
	if wopts.Enabled {
		wopts.Identity = opts.Identity
		srv, err := webhook.New(wopts, cfg, m, m.Metrics())
		if err != nil {
			logger.Error(err, "cannot build the admission webhook")
			return 1
		}
		m.AddReadyCheck(srv.Ready)
		running++
		go func() { done <- srv.Run(ctx) }()
	} else {
		logger.Info("running without the admission webhook (--webhook=false)")
	}
	go func() { done <- m.Run(ctx) }()
	failed := <-done
	cancel()
	for ; running > 1; running-- {
		if err := <-done; failed == nil {
			failed = err
		}
	}
	if failed != nil {
		logger.Error(failed, "stopped")
		return 1
	}
	logger.Info("stopped cleanly")
	klog.Flush()
	return 0
}
