package ratemonitor_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"

	"github.com/ratemonitor/ratemonitor"
)

// A Transport made without rules learns each key's limits from the upstream's answers: here two
// policies of the IETF RateLimit fields, one kept per partition key (pk).
func ExampleNew_noRules() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("RateLimit-Policy", `"burst";q=10;w=1, "day";q=1000;w=86400;pk=:YWNjdC0x:`)
		w.Header().Set("RateLimit", `"burst";r=9;t=1, "day";r=999;t=86400;pk=:YWNjdC0x:`)
	}))
	defer api.Close()
	tr, err := ratemonitor.New(nil, ratemonitor.WithPacing())
	if err != nil {
		panic(err)
	}
	defer tr.Close()
	resp, err := (&http.Client{Transport: tr}).Get(api.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	u, _ := url.Parse(api.URL)
	st, err := tr.Status(context.Background(), u.Host)
	if err != nil {
		panic(err)
	}
	for _, m := range st.Meters {
		fmt.Println(m.Meter, m.Rules[0].Rule)
	}
	fmt.Println(st.Meters[1].Key)
	// Output:
	// ietf:burst 10/1s
	// ietf:day 1000/24h0m0s
	// ietf:day:pk:YWNjdC0x
}
