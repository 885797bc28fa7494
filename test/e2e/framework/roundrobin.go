package framework

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// RoundRobin is a TCP proxy on loopback that hands each new connection to
// the next backend, as a Service in front of webhook replicas would. TLS
// passes through untouched.
type RoundRobin struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint64
	wg       sync.WaitGroup
}

// StartRoundRobin listens on a free loopback port.
func StartRoundRobin(backends []string) (*RoundRobin, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rr := &RoundRobin{ln: ln, backends: backends}
	rr.wg.Add(1)
	go rr.serve()
	return rr, nil
}

// Addr is the host:port to connect to.
func (rr *RoundRobin) Addr() string { return rr.ln.Addr().String() }

// Close stops accepting; open connections end with their peers.
func (rr *RoundRobin) Close() {
	rr.ln.Close()
	rr.wg.Wait()
}

func (rr *RoundRobin) serve() {
	defer rr.wg.Done()
	for {
		conn, err := rr.ln.Accept()
		if err != nil {
			return
		}
		backend := rr.backends[rr.next.Add(1)%uint64(len(rr.backends))]
		go proxy(conn, backend)
	}
}

func proxy(client net.Conn, backend string) {
	defer client.Close()
	server, err := net.Dial("tcp", backend)
	if err != nil {
		return
	}
	defer server.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); server.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); client.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}
