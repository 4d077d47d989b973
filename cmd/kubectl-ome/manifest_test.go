package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestKrewManifest checks plugins/ome.yaml against krew's conventions: the
// file is named after the plugin, the version is a v-prefixed semver once
// rendered, and every platform names its os and arch, an archive of this
// binary for them, and a checksum that `make plugin-krew` fills in.
func TestKrewManifest(t *testing.T) {
	data, err := os.ReadFile("../../plugins/ome.yaml")
	require.NoError(t, err)
	rendered := strings.ReplaceAll(string(data), "VERSION", "v1.2.3")
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			Homepage         string `json:"homepage"`
			ShortDescription string `json:"shortDescription"`
			Description      string `json:"description"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.UnmarshalStrict([]byte(rendered), &m))
	require.Equal(t, "krew.googlecontainertools.github.com/v1alpha2", m.APIVersion)
	require.Equal(t, "Plugin", m.Kind)
	require.Equal(t, "ome", m.Metadata.Name, "the manifest is ome.yaml, so the plugin is ome")
	require.Equal(t, "v1.2.3", m.Spec.Version)
	require.NotEmpty(t, m.Spec.ShortDescription)
	require.NotEmpty(t, m.Spec.Description)
	require.Len(t, m.Spec.Platforms, 4)
	for _, p := range m.Spec.Platforms {
		os, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		require.NotEmpty(t, os)
		require.NotEmpty(t, arch)
		require.True(t, strings.HasSuffix(p.URI, "/v1.2.3/kubectl-ome_"+os+"_"+arch+".tar.gz"), p.URI)
		require.Equal(t, "SHA256_"+strings.ToUpper(os+"_"+arch), p.SHA256, "make plugin-krew fills in the checksum")
		require.Equal(t, "kubectl-ome", p.Bin)
	}
}
