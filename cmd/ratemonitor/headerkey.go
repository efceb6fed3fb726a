package main

import (
	"os"

	"github.com/ratemonitor/ratemonitor/internal/credential"
)

// headerStoreKey returns the store key the middleware counts a request under when its key
// header, name (may be empty: not said), has the value v, as middleware.Limiter.HeaderKey
// documents it: "key:" + the hash of v (credential.Hash, HMAC-SHA-256) when name is a credential
// header (credential.IsHeader) or the secret is given, "key:" + v otherwise. The secret comes
// from the environment variable secretEnv, never the command line (which other users see in
// the process list); the variable must be set and not empty, as WithKeySecret refuses an
// empty secret.
func headerStoreKey(v, name, secretEnv string) (string, error) {
	var secret []byte
	if secretEnv != "" {
		s, ok := os.LookupEnv(secretEnv)
		if !ok || s == "" {
			return "", usagef("--key-secret-env %s: the variable is unset or empty; set it to the secret the middleware's WithKeySecret was given", secretEnv)
		}
		secret = []byte(s)
	}
	if secret == nil && !credential.IsHeader(name) {
		return "key:" + v, nil
	}
	return "key:" + credential.Hash(secret, v), nil
}
