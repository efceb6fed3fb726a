package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/sqlitestore"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
)

// TestStatusHeaderKeyHashesCredentialHeader: the middleware keyed by X-Api-Key hashes the
// header's values (a credential header), and so does `ratemonitor status --header-key V
// --key-header X-Api-Key`: it finds the 3 requests of the client under the hashed key, and never
// prints the API key. (It used to look up "key:"+V: 0 used, and the API key on stdout.)
func TestStatusHeaderKeyHashesCredentialHeader(t *testing.T) {
	const apiKey = "sk_live_rev2cliSECRET"
	s := must(rollingwindow.New(rule(60, time.Hour)))
	path := filepath.Join(t.TempDir(), "limits.db")
	st := must(sqlitestore.Open(context.Background(), path, sqlitestore.Options{}))
	l := must(middleware.New(st, s, middleware.WithKeyHeader("X-Api-Key")))
	if err := st.Record(context.Background(), s, l.HeaderKey(apiKey), 3); err != nil { // as l admits 3 requests
		t.Fatal(err)
	}
	st.Close()
	code, out, errs := runCmd(t, context.Background(), "status", "--store", "sqlite://"+path, "--rule", "60/1h", "--header-key", apiKey, "--key-header", "X-Api-Key")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "60/1h0m0s  3 ") {
		t.Errorf("status --header-key for a hashed header: want 3 used, got\n%s", out)
	}
	if strings.Contains(out, apiKey) {
		t.Errorf("status prints the API key:\n%s", out)
	}
}

// TestStatusHeaderKeyWithSecretFromEnv: with the fleet's secret (WithKeySecret) in the variable
// --key-secret-env names, --header-key finds the key the middleware counts under (3 used), whatever
// the header; an unset variable is a usage error (exit 2).
func TestStatusHeaderKeyWithSecretFromEnv(t *testing.T) {
	const clientKey, secret = "alice", "fleet-secret-32-bytes-long-xxxxx"
	s := must(rollingwindow.New(rule(60, time.Hour)))
	path := filepath.Join(t.TempDir(), "limits.db")
	st := must(sqlitestore.Open(context.Background(), path, sqlitestore.Options{}))
	l := must(middleware.New(st, s, middleware.WithKeyHeader("X-Client-Key"), middleware.WithKeySecret([]byte(secret))))
	if err := st.Record(context.Background(), s, l.HeaderKey(clientKey), 3); err != nil {
		t.Fatal(err)
	}
	st.Close()
	t.Setenv("RM_TEST_KEY_SECRET", secret)
	args := []string{"status", "--store", "sqlite://" + path, "--rule", "60/1h", "--header-key", clientKey, "--key-header", "X-Client-Key"}
	code, out, errs := runCmd(t, context.Background(), append(args, "--key-secret-env", "RM_TEST_KEY_SECRET")...)
	if code != 0 || !strings.Contains(out, "60/1h0m0s  3 ") {
		t.Errorf("with the secret: exit %d, want 0 and 3 used:\n%s%s", code, out, errs)
	}
	if code, _, _ := runCmd(t, context.Background(), append(args, "--key-secret-env", "RM_TEST_UNSET_VARIABLE")...); code != 2 {
		t.Errorf("an unset --key-secret-env variable: exit %d, want 2", code)
	}
	if code, _, errs := runCmd(t, context.Background(), args...); code != 3 || !strings.HasPrefix(errs, "ratemonitor: status: nothing recorded for key \"key:alice\" in ") {
		t.Errorf("without the secret (X-Client-Key is no credential header: key:alice): exit %d, want 3 and nothing recorded:\n%s", code, errs)
	}
}
