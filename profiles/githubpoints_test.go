package profiles

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestGitHubGraphQLPointsReadTheOperation: a mutation costs 5 points on GitHub's secondary
// limit and a query 1; a body that cannot be read again, or is not a GraphQL request, costs 5.
func TestGitHubGraphQLPointsReadTheOperation(t *testing.T) {
	for _, c := range []struct {
		name, body string
		want       int
	}{
		{"query", `{"query":"query { viewer { login } }"}`, 1},
		{"shorthand query", `{"query":"{ viewer { login } }"}`, 1},
		{"named mutation with variables", `{"query":"mutation Star($id: ID!) { addStar(input: {starrableId: $id}) { clientMutationId } }","variables":{"id":"R_1"}}`, 5},
		{"mutation after a comment", `{"query":"# star it\nmutation { addStar(input: {}) { clientMutationId } }"}`, 5},
		{"query naming a mutation in a comment", `{"query":"# not a mutation\nquery { viewer { login } }"}`, 1},
		{"query naming a mutation in a string", `{"query":"query { search(query: \"mutation\", type: REPOSITORY, first: 1) { repositoryCount } }"}`, 1},
		{"a field whose name starts with mutation", `{"query":"query { viewer { mutationCount } }"}`, 1},
		{"a query and a mutation", `{"query":"query A { viewer { login } } mutation B { addStar(input: {}) { clientMutationId } }"}`, 5},
		{"a mutation after a block string holding a quote", `{"query":"fragment F on Query { search(query: \"\"\"it's 5\" long\"\"\", type: ISSUE, first: 1) { issueCount } } mutation M { addStar(input: {starrableId: \"R_1\"}) { clientMutationId } }"}`, 5},
		{"a mutation after a block string holding a brace", `{"query":"query Q { search(query: \"\"\"a\"{\"b\"\"\", type: ISSUE, first: 1) { issueCount } } mutation M { addStar(input: {}) { clientMutationId } }"}`, 5},
		{"a mutation after a block string holding a hash", `{"query":"query Q { search(query: \"\"\"a\"#\"b\"\"\", type: ISSUE, first: 1) { issueCount } } mutation M { addStar(input: {}) { clientMutationId } }"}`, 5},
		{"a block string naming a mutation", `{"query":"query { search(query: \"\"\"mutation\"\"\", type: ISSUE, first: 1) { issueCount } }"}`, 1},
		{"not JSON", `query { viewer { login } }`, 5},
		{"no query", `{"variables":{}}`, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, "https://api.github.com/graphql", strings.NewReader(c.body))
			if got := githubGraphQLPoints(req); got != c.want {
				t.Errorf("%s: %d points, want %d", c.body, got, c.want)
			}
			if b, _ := io.ReadAll(req.Body); string(b) != c.body {
				t.Errorf("the body sent is %q, want it untouched", b)
			}
		})
	}
	req, _ := http.NewRequest(http.MethodPost, "https://api.github.com/graphql", io.NopCloser(strings.NewReader(`{"query":"{ viewer { login } }"}`)))
	if got := githubGraphQLPoints(req); got != 5 {
		t.Errorf("a body without GetBody: %d points, want 5", got)
	}
}
