package envoyrls_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/redlimit/redlimit/envoyrls"
)

// TestDocsYAML: every YAML block of docs/envoy.md is YAML, and every one
// that is a configuration of the service (it starts with "domain:")
// loads, so that the page cannot show a file the service refuses.
func TestDocsYAML(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?ms)^```yaml\n(.*?)^```").FindAllStringSubmatch(string(page), -1)
	configs := 0
	for _, b := range blocks {
		var v any
		if err := yaml.Unmarshal([]byte(b[1]), &v); err != nil {
			t.Errorf("not YAML: %v\n%s", err, b[1])
			continue
		}
		if !strings.HasPrefix(b[1], "domain:") {
			continue
		}
		configs++
		if _, err := envoyrls.ParseConfig([]envoyrls.File{{Name: "docs/envoy.md", Data: []byte(b[1])}}, envoyrls.ConfigOptions{}); err != nil {
			t.Errorf("%v\n%s", err, b[1])
		}
	}
	if len(blocks) < 6 || configs < 2 {
		t.Errorf("%d YAML blocks, %d configurations: the page lost its examples?", len(blocks), configs)
	}
}
