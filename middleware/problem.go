package middleware

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// problemContentType is the media type of problem details (RFC 9457 §3).
const problemContentType = "application/problem+json"

// problemDetails is the problem details object (RFC 9457 §3.1) the middleware writes as the
// body of its 429, 500 and 503 answers.
type problemDetails struct {
	// Type is a URI reference that identifies the problem type; "about:blank" means the
	// problem is no more than its status code.
	Type string `json:"type"`
	// Title is a short summary of the problem type: the status phrase for "about:blank".
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence: for a 429, which rule refused and when to retry.
	Detail string `json:"detail"`
	// Instance identifies this occurrence: by default the request's URL path.
	Instance string `json:"instance"`
}

// writeProblem writes p as the response, with Retry-After when retry ≥ 0 (whole seconds).
func writeProblem(w http.ResponseWriter, p problemDetails, retry int64) {
	body, err := json.Marshal(p)
	if err != nil { // only strings and an int: cannot happen
		http.Error(w, p.Title, p.Status)
		return
	}
	h := w.Header()
	h.Set("Content-Type", problemContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	if retry >= 0 {
		h.Set(fieldRetryAfter, strconv.FormatInt(retry, 10))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// problem returns the problem details for status and r, with the type "about:blank".
func (l *Limiter) problem(r *http.Request, status int, detail string) problemDetails {
	return problemDetails{
		Type:     "about:blank",
		Title:    http.StatusText(status),
		Status:   status,
		Detail:   detail,
		Instance: l.instance(r),
	}
}
