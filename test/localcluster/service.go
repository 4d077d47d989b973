package localcluster

import (
	"io"
	"net"
	"sync"
)

// Service stands in for a Kubernetes Service in front of several
// replicas: a TCP listener on 127.0.0.1 that hands each connection to the
// first backend that accepts it, so that one replica killed leaves the
// others serving, as kube-proxy would once the endpoint is gone.
type Service struct {
	Addr string

	mu       sync.Mutex
	backends []string
	ln       net.Listener
	conns    map[net.Conn]bool
}

// NewService listens on a free port of 127.0.0.1 and forwards to backends
// (host:port), in that order of preference.
func NewService(backends ...string) (*Service, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Service{Addr: ln.Addr().String(), backends: backends, ln: ln, conns: map[net.Conn]bool{}}
	go s.serve()
	return s, nil
}

func (s *Service) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.forward(c)
	}
}

func (s *Service) forward(c net.Conn) {
	s.mu.Lock()
	backends := s.backends
	s.mu.Unlock()
	var up net.Conn
	for _, b := range backends {
		var err error
		if up, err = net.Dial("tcp", b); err == nil {
			break
		}
	}
	if up == nil {
		c.Close()
		return
	}
	s.mu.Lock()
	s.conns[c], s.conns[up] = true, true
	s.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	delete(s.conns, up)
	s.mu.Unlock()
}

// Close stops listening and closes every connection through it.
func (s *Service) Close() {
	s.ln.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
	}
}
