package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/template"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/cli/values"
	"helm.sh/helm/v4/pkg/getter"
	release "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"ome.io/quota-manager/test/localcluster"
)

// kubeVersion is the Kubernetes version rendering and lint assume: the
// local control plane's (the SDK's own default is older than the chart's
// kubeVersion).
var kubeVersion = &common.KubeVersion{Version: "v1.35.4", Major: "1", Minor: "35"}

// Rendered is one rendering of the chart.
type Rendered struct {
	Objects []*unstructured.Unstructured
	Notes   string
	// Manifest is the rendered text, comments included.
	Manifest string
}

// Cluster stands for the objects Helm's lookup function finds, keyed by
// "apiVersion kind namespace name"; what is not in it is not found, as
// under `helm template`, where lookup finds nothing.
type Cluster map[string]map[string]any

func (c Cluster) lookup(apiVersion, kind, namespace, name string) (map[string]any, error) {
	if o, ok := c[apiVersion+" "+kind+" "+namespace+" "+name]; ok {
		return o, nil
	}
	return map[string]any{}, nil
}

// Dir is the chart's folder in this checkout.
func Dir() (string, error) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "charts", "ome-quota-manager"), nil
}

// APIServerSlice is the kubernetes EndpointSlice of namespace default of
// a cluster with two API servers, 192.0.2.10 and 192.0.2.11; APIServers
// is a cluster that holds it and nothing else.
var (
	APIServerSlice = map[string]any{
		"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
		"metadata": map[string]any{"name": "kubernetes", "namespace": "default"},
		"endpoints": []any{
			map[string]any{"addresses": []any{"192.0.2.10"}, "conditions": map[string]any{"ready": true}},
			map[string]any{"addresses": []any{"192.0.2.11"}, "conditions": map[string]any{"ready": true}},
		},
	}
	APIServers = Cluster{"discovery.k8s.io/v1 EndpointSlice default kubernetes": APIServerSlice}
)

// Render renders the chart as `helm install ome-quota-manager <chart>
// --namespace ns -f file... --set set... --dry-run=server` does against a
// cluster where lookup finds the API servers' EndpointSlice
// (APIServerSlice) and nothing else: as an install renders it.
func Render(ns string, files []string, set ...string) (*Rendered, error) {
	return RenderIn(APIServers, ns, files, set...)
}

// Template renders the chart as `helm template ome-quota-manager <chart>
// --namespace ns -f file... --set set...` does: lookup finds nothing, as
// with Argo CD or a client-side dry run.
func Template(ns string, files []string, set ...string) (*Rendered, error) {
	return RenderIn(nil, ns, files, set...)
}

// RenderIn renders as Render does, with lookup finding the objects of c
// (an install or upgrade against a cluster that holds them).
func RenderIn(c Cluster, ns string, files []string, set ...string) (*Rendered, error) {
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, err
	}
	vals, err := (&values.Options{ValueFiles: files, Values: set}).MergeValues(getter.Providers{})
	if err != nil {
		return nil, err
	}
	cfg := action.NewConfiguration()
	cfg.CustomTemplateFuncs = template.FuncMap{"lookup": c.lookup}
	inst := action.NewInstall(cfg)
	inst.DryRunStrategy = action.DryRunClient
	inst.Replace = true
	inst.ReleaseName = "ome-quota-manager"
	inst.Namespace = ns
	inst.KubeVersion = kubeVersion
	rel, err := inst.Run(ch, vals)
	if err != nil {
		return nil, err
	}
	r, ok := rel.(*release.Release)
	if !ok {
		return nil, fmt.Errorf("unexpected release type %T", rel)
	}
	out := &Rendered{Notes: r.Info.Notes, Manifest: r.Manifest}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(r.Manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out.Objects = append(out.Objects, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// Get returns the object of that kind and name, or nil.
func (r *Rendered) Get(kind, name string) *unstructured.Unstructured {
	for _, o := range r.Objects {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// Kinds lists kind/name of every object, in order.
func (r *Rendered) Kinds() []string {
	var out []string
	for _, o := range r.Objects {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	return out
}

// Lint runs `helm lint --strict` with the values files and returns what
// fails it (errors and warnings), one a line; empty means clean.
func Lint(files []string) (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	vals, err := (&values.Options{ValueFiles: files}).MergeValues(getter.Providers{})
	if err != nil {
		return "", err
	}
	l := action.NewLint()
	l.Strict = true
	l.Namespace = "ome"
	l.KubeVersion = kubeVersion
	res := l.Run([]string{dir}, vals)
	var b bytes.Buffer
	for _, e := range res.Errors {
		fmt.Fprintln(&b, e)
	}
	return b.String(), nil
}
