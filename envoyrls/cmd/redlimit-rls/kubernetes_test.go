package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"go.yaml.in/yaml/v3"
)

// manifest is what the walk-through's objects hold that the test reads.
type manifest struct {
	Kind     string
	Metadata struct{ Name string }
	Data     map[string]string
	Spec     struct {
		Template struct {
			Metadata struct{ Annotations map[string]string }
			Spec     struct {
				Containers []struct {
					Image string
					Env   []struct{ Name, Value string }
					Ports []struct {
						Name          string
						ContainerPort int `yaml:"containerPort"`
					}
					ReadinessProbe struct {
						HTTPGet struct {
							Path string
							Port int
						} `yaml:"httpGet"`
					} `yaml:"readinessProbe"`
					VolumeMounts []struct {
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
				}
			}
		}
	}
}

// kubernetesManifests reads the YAML block of docs/envoy.md after its
// "<!-- kubernetes: TestKubernetesWalkthrough -->" line.
func kubernetesManifests(t *testing.T) (configMap, deployment manifest) {
	t.Helper()
	page, err := os.ReadFile("../../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- kubernetes: TestKubernetesWalkthrough -->\n```yaml\n(.*?)\n```").FindSubmatch(page)
	if m == nil {
		t.Fatal("docs/envoy.md has no Kubernetes walk-through block")
	}
	dec := yaml.NewDecoder(bytes.NewReader(m[1]))
	for {
		var doc manifest
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		switch doc.Kind {
		case "ConfigMap":
			configMap = doc
		case "Deployment":
			deployment = doc
		}
	}
	if configMap.Data == nil || len(deployment.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("the walk-through lost its ConfigMap or its Deployment's container")
	}
	return configMap, deployment
}

// mountConfigMap writes a ConfigMap's data under dir as the kubelet
// mounts it: the files in a timestamped directory, ..data a link to it,
// each name a link through ..data.
func mountConfigMap(t *testing.T, dir, version string, data map[string]string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range data {
		if err := os.WriteFile(filepath.Join(dir, version, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The swap: a new link renamed over ..data.
	if err := os.Symlink(version, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// TestKubernetesWalkthrough: docs/envoy.md's Deployment and ConfigMap.
// Every variable of the Deployment is one of the reference's (so the
// reference reads the same manifest), and redlimit-rls, started with
// them (the Redis address and the ports made the test's) on the
// ConfigMap mounted as the kubelet mounts it, answers for its domain,
// is ready on the readiness probe's path, serves the metrics where the
// annotations say, and reloads when the ConfigMap's ..data is swapped.
func TestKubernetesWalkthrough(t *testing.T) {
	t.Parallel()
	configMap, deployment := kubernetesManifests(t)
	pod := deployment.Spec.Template
	c := pod.Spec.Containers[0]
	names := referenceSettingNames(t)
	root := t.TempDir()
	mount := c.VolumeMounts[0].MountPath // /data/ratelimit/config
	var env []string
	for _, e := range c.Env {
		if !slices.Contains(names, e.Name) {
			t.Errorf("%s is not one of the reference's settings", e.Name)
		}
		switch e.Name {
		case "REDIS_URL":
			e.Value = miniredis.RunT(t).Addr()
		case "RUNTIME_ROOT":
			if !strings.HasPrefix(mount, e.Value+"/") {
				t.Fatalf("the volume at %s is not under RUNTIME_ROOT %s", mount, e.Value)
			}
			e.Value = filepath.Join(root, e.Value)
		case "PROMETHEUS_ADDR":
			if e.Value != ":"+pod.Metadata.Annotations["prometheus.io/port"] {
				t.Errorf("Prometheus scrapes port %s, the metrics are at %s", pod.Metadata.Annotations["prometheus.io/port"], e.Value)
			}
			e.Value = "127.0.0.1:0"
		}
		env = append(env, e.Name+"="+e.Value)
	}
	dir := filepath.Join(root, mount)
	mountConfigMap(t, dir, "..2026_03_10_12_00_00.1", configMap.Data)
	p := mustRun(t, append(env, "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0", "REDLIMIT_RELOAD=20ms"))

	if probe := c.ReadinessProbe.HTTPGet; probe.Port != 8080 || probe.Path != "/healthcheck" {
		t.Errorf("readiness probe %+v: the HTTP port's /healthcheck", probe)
	}
	if code, body := get(t, p.httpAddr, c.ReadinessProbe.HTTPGet.Path); code != 200 || body != "OK" {
		t.Errorf("readiness: %d %q", code, body)
	}
	r, err := p.client(t).ShouldRateLimit(t.Context(), request("api", "remote_address", "10.0.0.1"))
	if err != nil || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 100 {
		t.Fatalf("the ConfigMap's limit: %v %v\n%s", r, err, p.log())
	}
	if code, body := get(t, p.promAddr, pod.Metadata.Annotations["prometheus.io/path"]); code != 200 || !strings.Contains(body, `redlimit_decisions_total{outcome="allowed",policy="api.remote_address"} 1`) {
		t.Errorf("scraped: %d\n%.3000s", code, body)
	}

	data := map[string]string{}
	for name, content := range configMap.Data {
		data[name] = strings.Replace(content, "requests_per_unit: 100", "requests_per_unit: 250", 1)
	}
	mountConfigMap(t, dir, "..2026_03_10_12_05_00.2", data)
	eventually(t, "the ConfigMap's new version", func() string {
		r, err := p.client(t).ShouldRateLimit(t.Context(), request("api", "remote_address", "10.0.0.1"))
		if err != nil || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 250 {
			return "still the old limit"
		}
		return ""
	})
}
