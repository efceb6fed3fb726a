package docs

import (
	"context"
	"net/http"
	"os"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func keyOfContext(req *http.Request) *http.Request {
	req = req.WithContext(ratemonitor.WithKey(req.Context(), "tenant-42"))
	return req
}

func fleetSecret(ctx context.Context, token string) error {
	secret := []byte(os.Getenv("RATEMONITOR_KEY_SECRET")) // the same in every process sharing the store
	tr, err := ratemonitor.New(nil, ratemonitor.WithRules(strategy.Rule{Limit: 60, Window: time.Minute}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHashedHeader("Authorization", secret, nil)))
	if err != nil {
		return err
	}
	defer tr.Close()
	// A request sent with "Authorization: Bearer "+token is counted under this key:
	st, err := tr.Status(ctx, ratemonitor.HashedKey(secret, "Bearer "+token))
	if err != nil {
		return err
	}
	_ = st
	return nil
}
