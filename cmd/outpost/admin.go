package main

import (
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/internal/admin"
)

// startExecutorAdmin serves the executor's metrics on addr (off when addr
// is empty) and sets cfg.Metrics. The returned stop marks the endpoint not
// ready and closes it.
func startExecutorAdmin(addr string, cfg *executor.Config, stderr io.Writer) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	reg := prometheus.NewRegistry()
	cfg.Metrics = executor.NewMetrics(reg)
	s, err := admin.Listen(addr, reg)
	if err != nil {
		return nil, fmt.Errorf("--admin-listen: %w", err)
	}
	fmt.Fprintf(stderr, "admin: http://%s/metrics\n", s.Addr())
	return func() { s.Stopping(); s.Close() }, nil
}
