package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"io"

	"clusterip-policy/internal/names"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Paths of the webhook's admission endpoints, as internal/names defines
// them: the binary serves them, base/webhook-configurations.yaml sends the
// apiservers to them (checked by webhookClientConfig in safety_test.go),
// and the e2e harness calls them.
const (
	MutatePath               = names.MutatePath
	ValidatePath             = names.ValidatePath
	ValidateServiceCIDRPath  = names.ValidateServiceCIDRPath
	ValidatePolicyObjectPath = names.ValidatePolicyObjectPath
)

// SplitYAML returns the non-empty documents of a multi-document YAML
// stream, each as written. A document that is not valid YAML is an error;
// one that holds only comments or nothing is left out.
func SplitYAML(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var probe map[string]any
		if err := yaml.Unmarshal(doc, &probe); err != nil {
			return nil, err
		}
		if len(probe) > 0 {
			docs = append(docs, doc)
		}
	}
}
