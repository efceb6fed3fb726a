package profiles

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// GitHub's secondary points (the REST page's "Calculating points for the secondary rate
// limit"): a request that reads costs 1, one that writes 5.
const (
	githubReadPoints  = 1
	githubWritePoints = 5
)

// githubRESTPoints is what req costs on GitHub's secondary limit of REST points: 5 for POST,
// PATCH, PUT and DELETE, 1 for any other method.
func githubRESTPoints(req *http.Request) int {
	switch req.Method {
	case http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete:
		return githubWritePoints
	}
	return githubReadPoints
}

// githubMaxQuery bounds how much of a GraphQL request's body is read to find its operation.
const githubMaxQuery = 1 << 20

// githubGraphQLPoints is what req costs on GitHub's secondary limit of GraphQL points: 5 for a
// mutation, 1 for a query. The body is read from a copy (req.GetBody, which http.NewRequest
// sets for a body in memory); a request without one, or whose body is not a GraphQL request
// of at most 1 MiB, costs 5: charging a query as a mutation sends less, never more.
func githubGraphQLPoints(req *http.Request) int {
	if req.GetBody == nil {
		return githubWritePoints
	}
	body, err := req.GetBody()
	if err != nil {
		return githubWritePoints
	}
	defer body.Close()
	var doc struct {
		Query string `json:"query"`
	}
	if json.NewDecoder(io.LimitReader(body, githubMaxQuery)).Decode(&doc) != nil || doc.Query == "" {
		return githubWritePoints
	}
	if graphQLMutates(doc.Query) {
		return githubWritePoints
	}
	return githubReadPoints
}

// graphQLMutates reports whether a GraphQL document defines a mutation: an operation whose
// first word, outside any braces, strings and comments, is "mutation" (GraphQL spec,
// "Document" and "Operations"). A document of several operations counts as a mutation when
// any of them is one.
func graphQLMutates(doc string) bool {
	depth := 0
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; {
		case c == '#': // a comment, to the end of the line
			for i < len(doc) && doc[i] != '\n' && doc[i] != '\r' {
				i++
			}
		case strings.HasPrefix(doc[i:], `"""`): // a block string: only \""" escapes in it
			for i += 3; i < len(doc) && !strings.HasPrefix(doc[i:], `"""`); i++ {
				if strings.HasPrefix(doc[i:], `\"""`) {
					i += 3
				}
			}
			i += 2
		case c == '"': // a string, with backslash escapes
			for i++; i < len(doc) && doc[i] != '"'; i++ {
				if doc[i] == '\\' {
					i++
				}
			}
		case c == '{' || c == '(' || c == '[':
			depth++
		case c == '}' || c == ')' || c == ']':
			depth--
		case depth == 0 && strings.HasPrefix(doc[i:], "mutation") &&
			(i == 0 || !nameChar(doc[i-1])) && (i+8 == len(doc) || !nameChar(doc[i+8])):
			return true
		}
	}
	return false
}

// nameChar reports whether c may be part of a GraphQL name.
func nameChar(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
