// Package admin serves an operator's view of a relay or an executor on a
// separate port: Prometheus metrics at /metrics, /livez (the process
// answers) and /readyz (it serves; 503 while it shuts down).
package admin

import (
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server is a running admin endpoint.
type Server struct {
	ln      net.Listener
	srv     *http.Server
	stopped atomic.Bool
}

// Listen serves reg's metrics (plus Go runtime and process metrics) on
// addr (HOST:PORT).
func Listen(addr string, reg *prometheus.Registry) (*Server, error) {
	return ListenWith(addr, reg, Options{})
}

// Options add to what Listen serves.
type Options struct {
	// Ready, when set, is asked by /readyz: an error answers 503 with its
	// text (a relay that has lost its cluster's etcd, say).
	Ready func() error
	// Handlers are served beside the others (path → handler).
	Handlers map[string]http.Handler
}

// ListenWith is Listen with Options.
func ListenWith(addr string, reg *prometheus.Registry, o Options) (*Server, error) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if s.stopped.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		if o.Ready != nil {
			if err := o.Ready(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.Write([]byte("ok\n"))
	})
	for path, h := range o.Handlers {
		mux.Handle(path, h)
	}
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Stopping makes /readyz answer 503.
func (s *Server) Stopping() { s.stopped.Store(true) }

// Close stops serving.
func (s *Server) Close() error { return s.srv.Close() }
