package retry

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/ratemonitor/ratemonitor/internal/credential"
)

// giveUp is the retryablehttp.ErrorHandler NewClient sets: it ends the retries as retryablehttp
// does by default (the response body drained and closed, no response, an error
// "<method> <url> giving up after <n> attempt(s): <last error>"), except that URLs in the
// message have every query parameter's value, every query part without "=" and the whole
// user info replaced by "xxxxx", since APIs take tokens in the query (access_token=, key=, a
// bare ?<token>) and as the user name (Stripe's secret key, a GitHub token); a token in the
// path (Telegram's /bot<token>/) is kept. The last error is kept for
// errors.Is and errors.As; when it is a *url.Error (as http.Client returns), it is a copy
// whose URL is redacted the same way.
func giveUp(resp *http.Response, err error, attempts int) (*http.Response, error) {
	what := ""
	if resp != nil {
		if resp.Request != nil {
			what = resp.Request.Method + " " + credential.URL(resp.Request.URL)
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
	}
	var ue *url.Error
	if errors.As(err, &ue) && err == error(ue) {
		c := *ue
		c.URL = redactString(ue.URL)
		err = &c
		if what == "" {
			what = strings.ToUpper(ue.Op) + " " + c.URL
		}
	}
	if what == "" {
		what = "the request"
	}
	if err == nil {
		return nil, fmt.Errorf("%s giving up after %d attempt(s)", what, attempts)
	}
	return nil, fmt.Errorf("%s giving up after %d attempt(s): %w", what, attempts, err)
}

// redactString is credential.URL for a URL in text; text that does not parse is replaced.
func redactString(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return credential.URL(u)
}
