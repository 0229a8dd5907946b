package main

import (
	"encoding/json"
	"testing"

	"example.com/wasmop/sdk/routing"
)

func request(http string) routing.Request {
	return routing.Request{
		DynamicEnv: "shop/feature-x", UniqueName: "reviews-shop-feature-x", Subset: "feature-x",
		Host: "reviews", Namespace: "shop", DefaultVersion: "shared",
		Matches: []routing.IstioMatch{{Headers: []routing.HeaderMatch{
			{Name: "end-user", Value: routing.StringMatch{Kind: routing.Exact, Value: "jason"}},
		}}},
		RoutePrefix:    "de-feature-x-",
		VirtualService: `{"metadata": {"namespace": "shop"}, "spec": {"http": ` + http + `}}`,
	}
}

func routes(t *testing.T, r routing.Request) string {
	t.Helper()
	http, err := Route(r)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(http)
	return string(out)
}

func TestACopyOfTheDefaultRouteGoesToTheSubset(t *testing.T) {
	got := routes(t, request(`[{"name":"default","match":[{"uri":{"prefix":"/"}}],`+
		`"route":[{"destination":{"host":"reviews","subset":"shared"},"weight":100}]}]`))
	want := `[{"match":[{"headers":{"end-user":{"exact":"jason"}},"uri":{"prefix":"/"}}],"name":"de-feature-x-0",` +
		`"route":[{"destination":{"host":"reviews","subset":"feature-x"}}]},` +
		`{"name":"default","match":[{"uri":{"prefix":"/"}}],"route":[{"destination":{"host":"reviews","subset":"shared"},"weight":100}]}]`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if again := routes(t, request(got)); again != got {
		t.Errorf("on its own output: %s", again)
	}
}

func TestOtherRoutesStayAndConflictingEntriesAreLeftOut(t *testing.T) {
	in := `[{"name":"v3","route":[{"destination":{"host":"reviews","subset":"v3"}}]},` +
		`{"match":[{"headers":{"end-user":{"exact":"bob"}}}],"name":"bob","route":[{"destination":{"host":"reviews","subset":"shared"}}]}]`
	if got := routes(t, request(in)); got != in {
		t.Errorf("got %s", got)
	}
}

func TestSettingsAndVirtualServiceErrorsNameTheirField(t *testing.T) {
	if ParseSettings("{}") != nil {
		t.Error("{} refused")
	}
	if err := ParseSettings(`{"colour": 1}`); err == nil || err.Field != "settings" {
		t.Errorf("%v", err)
	}
	r := request("[]")
	r.VirtualService = "nope"
	if _, err := Route(r); err == nil || err.Field != "request.virtual-service" {
		t.Errorf("%v", err)
	}
}
