package transport

import (
	"log"
	"net"
	"net/http"
	"time"
)

// ServeHTTP serves h on ln in the background with the bounds every
// outpost HTTP front uses (WebSocket upgrades, /readyz): headers within
// 10 s and at most 64 KiB. done closes when serving has stopped (after
// srv.Close or srv.Shutdown).
func ServeHTTP(ln net.Listener, h http.Handler, errorLog *log.Logger) (srv *http.Server, done <-chan struct{}) {
	srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          errorLog,
	}
	d := make(chan struct{})
	go func() {
		defer close(d)
		srv.Serve(ln)
	}()
	return srv, d
}
