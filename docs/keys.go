package docs

import (
	"context"
	"net/http"
	"os"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func keyOfContext(ctx context.Context, req *http.Request) *http.Request {
	req = req.WithContext(ratemonitor.WithKey(ctx, "tenant-42"))
	return req
}

func fleetSecret(ctx context.Context, token string, rules ...strategy.Rule) error {
	secret := []byte(os.Getenv("RATEMONITOR_KEY_SECRET")) // the same in every process sharing the store
	tr, err := ratemonitor.New(nil, ratemonitor.WithRules(rules...),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHashedHeader("Authorization", secret, nil)))
	// tr.Status(ctx, ratemonitor.HashedKey(secret, "Bearer "+token)) looks the key up.
	if err != nil {
		return err
	}
	if _, err := tr.Status(ctx, ratemonitor.HashedKey(secret, "Bearer "+token)); err != nil {
		return err
	}
	return tr.Close()
}
