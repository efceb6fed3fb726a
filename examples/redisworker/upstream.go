package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"
)

// strict is an upstream that enforces limit per window per tenant from its own log of arrival
// instants (s counts at t while s ≤ t < s+W), answering 429 to anything over.
type strict struct {
	limit  int
	window time.Duration

	mu       sync.Mutex
	arrivals map[string][]time.Time
	refused  int
}

func (u *strict) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	tenant := r.Header.Get("Xero-Tenant-Id")
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, s := range u.arrivals[tenant] {
		if now.Sub(s) < u.window {
			n++
		}
	}
	if n >= u.limit {
		u.refused++
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	u.arrivals[tenant] = append(u.arrivals[tenant], now)
}

// serve runs the strict upstream in its own process, so that its timing does not depend on how
// the test binary was built (-race slows a server by an order of magnitude). It prints
// "listening ADDR", serves until its standard input closes, then prints "refused N" and, per
// tenant, "tenant ID COUNT FIRST LAST" with Unix nanosecond instants.
func serve(addr string, limit int, window time.Duration, stdin io.Reader, out io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	u := &strict{limit: limit, window: window, arrivals: map[string][]time.Time{}}
	srv := &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	fmt.Fprintf(out, "listening %s\n", ln.Addr())
	if f, ok := out.(*os.File); ok {
		f.Sync()
	}
	io.Copy(io.Discard, bufio.NewReader(stdin))
	srv.Close()
	u.mu.Lock()
	defer u.mu.Unlock()
	fmt.Fprintf(out, "refused %d\n", u.refused)
	tenants := make([]string, 0, len(u.arrivals))
	for k := range u.arrivals {
		tenants = append(tenants, k)
	}
	sort.Strings(tenants)
	for _, k := range tenants {
		a := u.arrivals[k]
		sort.Slice(a, func(i, j int) bool { return a[i].Before(a[j]) })
		fmt.Fprintf(out, "tenant %s %d %d %d\n", k, len(a), a[0].UnixNano(), a[len(a)-1].UnixNano())
	}
	return nil
}
