package routing

import (
	"reflect"
	"testing"

	"example.com/wasmop/sdk"
)

// lowerArgs stores settings and r into m as the host lowers route's parameters (the layout in
// the package doc), and returns the tuple's address.
func lowerArgs(m *sdk.SliceMemory, settings string, r Request) uint32 {
	args := m.Alloc(80, 4)
	sdk.PutString(m, args, settings)
	at := args + 8
	for i, s := range []string{r.DynamicEnv, r.UniqueName, r.Subset, r.Host, r.Namespace, r.DefaultVersion} {
		sdk.PutString(m, at+uint32(8*i), s)
	}
	matches := m.Alloc(uint32(16*len(r.Matches)), 4)
	for i, im := range r.Matches {
		elem := matches + uint32(16*i)
		headers := m.Alloc(uint32(20*len(im.Headers)), 4)
		for j, h := range im.Headers {
			hm := headers + uint32(20*j)
			sdk.PutString(m, hm, h.Name)
			sdk.PutU8(m, hm+8, uint8(h.Value.Kind))
			sdk.PutString(m, hm+12, h.Value.Value)
		}
		labels := m.Alloc(uint32(16*len(im.SourceLabels)), 4)
		for j, l := range im.SourceLabels {
			sdk.PutString(m, labels+uint32(16*j), l.Key)
			sdk.PutString(m, labels+uint32(16*j)+8, l.Value)
		}
		sdk.PutU32(m, elem, headers)
		sdk.PutU32(m, elem+4, uint32(len(im.Headers)))
		sdk.PutU32(m, elem+8, labels)
		sdk.PutU32(m, elem+12, uint32(len(im.SourceLabels)))
	}
	sdk.PutU32(m, at+48, matches)
	sdk.PutU32(m, at+52, uint32(len(r.Matches)))
	sdk.PutString(m, at+56, r.RoutePrefix)
	sdk.PutString(m, at+64, r.VirtualService)
	return args
}

func TestArgsLiftFromTheTuple(t *testing.T) {
	want := Request{
		DynamicEnv: "shop/feature-x", UniqueName: "reviews-shop-feature-x", Subset: "feature-x",
		Host: "reviews", Namespace: "shop", DefaultVersion: "shared",
		Matches: []IstioMatch{
			{
				Headers: []HeaderMatch{
					{Name: "x-env", Value: StringMatch{Kind: Prefix, Value: "feature-x"}},
					{Name: "cookie", Value: StringMatch{Kind: Regex, Value: "^env=x$"}},
				},
				SourceLabels: []Label{{Key: "app", Value: "productpage"}},
			},
			{Headers: []HeaderMatch{{Name: "end-user", Value: StringMatch{Kind: Exact, Value: "jason"}}}, SourceLabels: []Label{}},
		},
		RoutePrefix:    "de-feature-x-1a2b3c-",
		VirtualService: `{"spec":{"http":[]}}`,
	}
	m := &sdk.SliceMemory{}
	settings, got := LiftArgs(m, lowerArgs(m, `{"a":1}`, want))
	if settings != `{"a":1}` {
		t.Errorf("settings %q", settings)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("lifted\n%+v\nwant\n%+v", got, want)
	}
}

func TestNoMatchesLiftAsAnEmptyList(t *testing.T) {
	m := &sdk.SliceMemory{}
	_, got := LiftArgs(m, lowerArgs(m, "{}", Request{Host: "reviews"}))
	if got.Matches == nil || len(got.Matches) != 0 || got.Host != "reviews" {
		t.Errorf("%+v", got)
	}
}

func TestRouteResponseLayout(t *testing.T) {
	m := &sdk.SliceMemory{}
	area := LowerRoute(m, Response{HTTP: `[{"name":"default"}]`}, nil)
	if m.U8(area) != 0 || m.String(area+4) != `[{"name":"default"}]` {
		t.Errorf("tag %d, http %q", m.U8(area), m.String(area+4))
	}
	area = LowerRoute(m, Response{}, &sdk.PluginError{Message: "not JSON", Field: "request.virtual-service"})
	if m.U8(area) != 1 || m.String(area+4) != "not JSON" || m.String(area+16) != "request.virtual-service" {
		t.Errorf("tag %d, %q at %q", m.U8(area), m.String(area+4), m.String(area+16))
	}
}

func TestStringMatchInIstioForm(t *testing.T) {
	got := StringMatch{Kind: Regex, Value: "^a"}.Istio()
	if !reflect.DeepEqual(got, map[string]any{"regex": "^a"}) {
		t.Errorf("%v", got)
	}
	if Exact.String() != "exact" || Prefix.String() != "prefix" {
		t.Errorf("%s %s", Exact, Prefix)
	}
}
