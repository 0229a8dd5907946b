// Command istio-validate runs Istio's own validation (istio.io/istio/pkg/config/validation, the
// code istiod's webhook and `istioctl validate` run) on the VirtualServices and
// DestinationRules of the YAML documents on stdin (documents separated by `---`, `List`s
// too). It prints one line per object, `valid` or Istio's errors and warnings (unreachable
// rules included), and exits 1 if any object has one. scripts/setup.d/75-istio-validate.sh
// builds it; host/wasmop/tests/routing_plan.rs and e2e_routing.rs run it.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	networking "istio.io/api/networking/v1alpha3"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/validation"
	"sigs.k8s.io/yaml"
)

type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec  json.RawMessage   `json:"spec"`
	Items []json.RawMessage `json:"items"`
}

// check validates one object; it returns false when Istio reports anything.
func check(raw []byte) bool {
	var obj object
	if err := json.Unmarshal(raw, &obj); err != nil {
		fmt.Printf("not an object: %v\n", err)
		return false
	}
	if obj.Kind == "List" {
		ok := true
		for _, item := range obj.Items {
			ok = check(item) && ok
		}
		return ok
	}
	id := fmt.Sprintf("%s %s/%s", obj.Kind, obj.Metadata.Namespace, obj.Metadata.Name)
	cfg := config.Config{Meta: config.Meta{Name: obj.Metadata.Name, Namespace: obj.Metadata.Namespace}}
	var warn validation.Warning
	var err error
	switch obj.Kind {
	case "VirtualService":
		spec := &networking.VirtualService{}
		if err = protojson.Unmarshal(obj.Spec, spec); err == nil {
			cfg.Spec = spec
			warn, err = validation.ValidateVirtualService(cfg)
		}
	case "DestinationRule":
		spec := &networking.DestinationRule{}
		if err = protojson.Unmarshal(obj.Spec, spec); err == nil {
			cfg.Spec = spec
			warn, err = validation.ValidateDestinationRule(cfg)
		}
	default:
		return true
	}
	switch {
	case err != nil:
		fmt.Printf("%s: error: %v\n", id, err)
		return false
	case warn != nil:
		fmt.Printf("%s: warning: %v\n", id, warn)
		return false
	}
	fmt.Printf("%s: valid\n", id)
	return true
}

func main() {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "istio-validate: cannot read stdin: %v\n", err)
		os.Exit(2)
	}
	ok := true
	for i, doc := range strings.Split("\n"+string(data), "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		raw, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			fmt.Printf("document %d: not YAML: %v\n", i, err)
			ok = false
			continue
		}
		ok = check(raw) && ok
	}
	if !ok {
		os.Exit(1)
	}
}
