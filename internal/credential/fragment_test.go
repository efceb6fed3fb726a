package credential

import (
	"net/url"
	"testing"
)

// TestURLRedactsFragment: an OAuth implicit-grant redirect URL carries the token in its fragment
// (RFC 6749 §4.2.2: "#access_token=…"); a request built from such a URL keeps the fragment in
// req.URL (net/http does not send it, but URL prints it): URL replaces the whole fragment, raw
// (escaped) form too, and leaves a URL without one as it was.
func TestURLRedactsFragment(t *testing.T) {
	for in, want := range map[string]string{
		"https://app.example/callback#access_token=SECRETTOKEN&token_type=bearer": "https://app.example/callback#xxxxx",
		"https://app.example/cb#access_token=SECRET%2FTOKEN":                      "https://app.example/cb#xxxxx",
		"https://app.example/cb?a=b#t":                                            "https://app.example/cb?a=xxxxx#xxxxx",
		"https://app.example/cb":                                                  "https://app.example/cb",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := URL(u); got != want {
			t.Errorf("URL(%s) = %q, want %q", in, got, want)
		}
	}
}
