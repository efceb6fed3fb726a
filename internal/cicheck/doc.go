// Package cicheck holds no code: its tests check the repository-hygiene scripts under .ci/
// (check-files) and .gitignore, so `go test ./...` runs them with the rest of the suite.
package cicheck
