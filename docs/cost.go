package docs

import (
	"net/http"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

func shopifyCost(estimate func(*http.Request) int) error {
	// import "github.com/ratemonitor/ratemonitor/cost" and ".../tokenbucket"
	rule, err := tokenbucket.Rule(1000, 50) // your plan's bucket (points) and restore rate (points a second)
	if err != nil {
		return err
	}
	bucket, err := tokenbucket.New(rule)
	if err != nil {
		return err
	}
	tr, err := ratemonitor.New(http.DefaultTransport,
		ratemonitor.WithStrategy(bucket),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHost), // one bucket per shop
		ratemonitor.WithPacing(),
		ratemonitor.WithSync(ratemonitor.SyncConfig{}),               // takes the points Shopify says remain
		ratemonitor.WithCost(estimate),                               // func(*http.Request) int: your estimate
		ratemonitor.WithCostReport(cost.ShopifyGraphQL(rule.Window))) // then Shopify's word
	if err != nil {
		return err
	}
	defer tr.Close()
	return nil
}

func tokenBucketClient() error {
	r, err := tokenbucket.Rule(10, 2) // 10 tokens, 2 per second: Limit 10, Window 5s
	if err != nil {
		return err
	}
	s, err := tokenbucket.New(r)
	if err != nil {
		return err
	}
	tr, err := ratemonitor.New(http.DefaultTransport, ratemonitor.WithStrategy(s), ratemonitor.WithPacing())
	if err != nil {
		return err
	}
	defer tr.Close()
	return nil
}
