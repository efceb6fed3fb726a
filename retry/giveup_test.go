package retry

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestGiveUpRedactsUserInfoCredential: giveUp's error, from a response or from a url.Error, does
// not show a credential in the URL's user name. Stripe documents its secret key as the Basic
// user name (curl -u sk_test_...:), and GitHub and GitLab accept a token as the URL's user name;
// net/http sends the URL's user info as Basic credentials, so the user name is redacted too, not
// only the password (as url.URL.Redacted does).
func TestGiveUpRedactsUserInfoCredential(t *testing.T) {
	const key = "sk_test_rev2SECRETkey"
	for _, raw := range []string{
		"https://" + key + ":@api.stripe.com/v1/charges", // curl -u key:
		"https://" + key + "@api.github.com/user",        // token as the user name
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		resp := &http.Response{StatusCode: 503, Body: http.NoBody, Request: &http.Request{Method: "GET", URL: u}}
		_, gerr := giveUp(resp, errors.New("503"), 3)
		if strings.Contains(gerr.Error(), key) {
			t.Errorf("giveUp for %s: %q shows the credential", u.Host, gerr)
		}
		_, gerr = giveUp(nil, &url.Error{Op: "Get", URL: raw, Err: errors.New("connection refused")}, 3)
		if strings.Contains(gerr.Error(), key) {
			t.Errorf("giveUp (url.Error) for %s: %q shows the credential", u.Host, gerr)
		}
	}
}

// TestGiveUpRedactsBareQuery: a query part without "=" (?<token>, as some webhook URLs carry a
// signature) is redacted too, not only the values of key=value pairs.
func TestGiveUpRedactsBareQuery(t *testing.T) {
	const tok = "ghp_rev2BareQueryToken"
	u, _ := url.Parse("https://hooks.example.com/in?" + tok)
	resp := &http.Response{StatusCode: 503, Body: http.NoBody, Request: &http.Request{Method: "POST", URL: u}}
	_, err := giveUp(resp, errors.New("503"), 2)
	if strings.Contains(err.Error(), tok) {
		t.Errorf("giveUp: %q shows the bare query", err)
	}
}
