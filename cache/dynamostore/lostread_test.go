package dynamostore

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/dynamostore/dynalitetest"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore/internal/dynalite"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// cutProxy forwards TCP connections to a server, and cuts the answer to the next armed
// GetItem requests after its header: the client gets a 200 whose body never comes, as when a
// connection is lost while a read's answer arrives.
type cutProxy struct {
	ln      net.Listener
	backend string
	armed   atomic.Int32 // GetItem answers still to cut
	cut     atomic.Int32 // answers cut
	wg      sync.WaitGroup
}

func newCutProxy(t *testing.T, backend string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, backend: backend}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.serve(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *cutProxy) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.backend)
	if err != nil {
		return
	}
	defer server.Close()
	var cutNext atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				// The request's X-Amz-Target names the operation.
				if bytes.Contains(buf[:n], []byte("DynamoDB_20120810.GetItem")) && p.armed.Add(-1) >= 0 {
					cutNext.Store(true)
				}
				if _, werr := server.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	var head []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if !cutNext.Load() {
				if _, werr := client.Write(buf[:n]); werr != nil {
					break
				}
			} else {
				head = append(head, buf[:n]...)
				if i := bytes.Index(head, []byte("\r\n\r\n")); i >= 0 {
					client.Write(head[:i+4])
					p.cut.Add(1)
					break // the body never comes: close both
				}
			}
		}
		if err != nil {
			break
		}
	}
	client.Close()
	server.Close()
	<-done
}

// TestReadLostMidAnswerIsReadAgainOnce: a read whose answer is cut after its header (a 200 with
// no body) is made once more, so a Record through it counts once; two cut in a row fail the
// operation, which then writes nothing.
func TestReadLostMidAnswerIsReadAgainOnce(t *testing.T) {
	srv := dynalitetest.Start(t)
	srv.CreateTable(CreateTable, "ratelimits")
	proxy := newCutProxy(t, srv.Endpoint[len("http://"):])
	clk := clock.NewManual(t0)
	st := newStore(t, dynalite.NewClient("http://"+proxy.ln.Addr().String()), Options{Clock: clk})
	direct := newStore(t, srv.Client(), Options{Clock: clk})
	s := must(rollingwindow.New(strategy.Rule{Limit: 10, Window: time.Minute}))
	ctx := context.Background()

	proxy.armed.Store(1)
	if err := st.Record(ctx, s, "k", 1); err != nil {
		t.Fatalf("Record with one answer cut: %v, want it read again", err)
	}
	if c := proxy.cut.Load(); c != 1 {
		t.Fatalf("%d answers cut, want 1: the test did not cut the read", c)
	}
	if u := storetest.Used(t, direct, s, "k"); u[0] != 1 {
		t.Errorf("used %d after one Record, want 1", u[0])
	}

	proxy.armed.Store(2)
	err := st.Record(ctx, s, "k", 1)
	if err == nil || !lostConnection(err) {
		t.Fatalf("Record with two answers cut in a row: %v, want the lost connection's error", err)
	}
	if c := proxy.cut.Load(); c != 3 {
		t.Fatalf("%d answers cut, want 3", c)
	}
	if u := storetest.Used(t, direct, s, "k"); u[0] != 1 {
		t.Errorf("used %d after a failed Record, want 1: nothing written", u[0])
	}
	if err := st.Record(ctx, s, "k", 1); err != nil {
		t.Fatal(err)
	}
	if u := storetest.Used(t, direct, s, "k"); u[0] != 2 {
		t.Errorf("used %d, want 2", u[0])
	}
}
