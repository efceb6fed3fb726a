package ratemonitor_test

import (
	"fmt"
	"net/http"

	"github.com/ratemonitor/ratemonitor"
)

// A key function over a credential header counts the credential under its hash, so the token
// reaches no store, error or log. KeyByHashedHeader takes a secret the fleet shares.
func ExampleKeyByHeader_credential() {
	req, err := http.NewRequest(http.MethodGet, "https://api.github.com/user", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	req.Header.Set("Authorization", "Bearer ghp_example")
	fmt.Println(ratemonitor.KeyByHeader("Authorization", nil)(req))
	fmt.Println(ratemonitor.KeyByHashedHeader("Authorization", []byte("fleet secret from config"), nil)(req))
	fmt.Println(ratemonitor.HashedKey(nil, "Bearer ghp_example")) // the key to ask Status about
	// Output:
	// hmac:43a38baf36ee2a499a83cfe4fb6e5a6b
	// hmac:2f5b97c7866e6ec41030b5c3e9a1b09d
	// hmac:43a38baf36ee2a499a83cfe4fb6e5a6b
}
