package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"ome.io/quota-manager/test/localcluster"
)

type descriptor struct {
	MediaType string            `json:"mediaType"`
	Digest    string            `json:"digest"`
	Size      int64             `json:"size"`
	Platform  map[string]string `json:"platform"`
}

// readTar returns every regular file of a tarball by name.
func readTar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		require.NoError(t, err)
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		files[h.Name] = data
	}
}

// blob returns a blob of the layout by digest, checking the digest and size.
func blob(t *testing.T, files map[string][]byte, d descriptor) []byte {
	t.Helper()
	algo, hexd, ok := strings.Cut(d.Digest, ":")
	require.True(t, ok && algo == "sha256", d.Digest)
	data, ok := files["blobs/sha256/"+hexd]
	require.True(t, ok, "blob %s is in the tarball", d.Digest)
	sum := sha256.Sum256(data)
	require.Equal(t, hexd, hex.EncodeToString(sum[:]), "blob %s's content", d.Digest)
	require.Equal(t, d.Size, int64(len(data)), "blob %s's size", d.Digest)
	return data
}

// staticELF checks that bin is a static Linux binary for machine and
// returns the Go package it was built from, with its module's path and
// version.
func staticELF(t *testing.T, bin []byte, machine elf.Machine) (pkg, mod, version string) {
	t.Helper()
	exe, err := elf.NewFile(bytes.NewReader(bin))
	require.NoError(t, err)
	require.Equal(t, machine, exe.Machine)
	for _, p := range exe.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "a static binary has no interpreter")
		require.NotEqual(t, elf.PT_DYNAMIC, p.Type, "a static binary has no dynamic section")
	}
	libs, err := exe.ImportedLibraries()
	require.NoError(t, err)
	require.Empty(t, libs)
	info, err := buildinfo.Read(bytes.NewReader(bin))
	require.NoError(t, err)
	return info.Path, info.Main.Path, info.Main.Version
}

// TestMakeImage: for each architecture, `make image` writes a tarball whose
// image is the guide's Dockerfile's: two static binaries, the manager and
// the ClusterProfile secret-reader credential plugin that the chart's
// default providers file runs, USER 65532:65532, the manager as the
// entrypoint.
func TestMakeImage(t *testing.T) {
	root, err := localcluster.RepoRoot()
	require.NoError(t, err)
	// The plugin comes from the module version go.mod requires (the one
	// the manager's credentials package is built from).
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "sigs.k8s.io/cluster-inventory-api").Output()
	require.NoError(t, err)
	inventoryVersion := strings.TrimSpace(string(out))
	require.NotEmpty(t, inventoryVersion)
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		t.Run(arch, func(t *testing.T) {
			out := t.TempDir()
			cmd := exec.Command("make", "image", "GOARCH="+arch, "IMAGE=registry.example.com/ome/ome-quota-manager:dev", "IMAGE_DIR="+out)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "GOFLAGS=")
			log, err := cmd.CombinedOutput()
			require.NoError(t, err, "make image:\n%s", log)

			f, err := os.Open(filepath.Join(out, "ome-quota-manager-"+arch+".tar"))
			require.NoError(t, err)
			defer f.Close()
			files := readTar(t, f)
			require.JSONEq(t, `{"imageLayoutVersion":"1.0.0"}`, string(files["oci-layout"]))

			var index struct {
				Manifests []descriptor `json:"manifests"`
			}
			require.NoError(t, json.Unmarshal(files["index.json"], &index))
			require.Len(t, index.Manifests, 1)
			require.Equal(t, map[string]string{"os": "linux", "architecture": arch}, index.Manifests[0].Platform)
			var manifest struct {
				MediaType string       `json:"mediaType"`
				Config    descriptor   `json:"config"`
				Layers    []descriptor `json:"layers"`
			}
			require.NoError(t, json.Unmarshal(blob(t, files, index.Manifests[0]), &manifest))
			require.Equal(t, "application/vnd.oci.image.manifest.v1+json", manifest.MediaType)

			var config struct {
				OS           string `json:"os"`
				Architecture string `json:"architecture"`
				Config       struct {
					User       string   `json:"User"`
					Entrypoint []string `json:"Entrypoint"`
					Cmd        []string `json:"Cmd"`
				} `json:"config"`
				RootFS struct {
					DiffIDs []string `json:"diff_ids"`
				} `json:"rootfs"`
			}
			require.NoError(t, json.Unmarshal(blob(t, files, manifest.Config), &config))
			require.Equal(t, "linux", config.OS)
			require.Equal(t, arch, config.Architecture)
			require.Equal(t, "65532:65532", config.Config.User)
			require.Equal(t, []string{"/ome-quota-manager"}, config.Config.Entrypoint)
			require.Empty(t, config.Config.Cmd)

			// Docker's manifest.json names the same config and layer.
			var docker []struct {
				Config   string
				RepoTags []string
				Layers   []string
			}
			require.NoError(t, json.Unmarshal(files["manifest.json"], &docker))
			require.Len(t, docker, 1)
			require.Equal(t, "blobs/sha256/"+strings.TrimPrefix(manifest.Config.Digest, "sha256:"), docker[0].Config)
			require.Equal(t, []string{"registry.example.com/ome/ome-quota-manager:dev"}, docker[0].RepoTags)

			// One layer, holding two files: the static binaries.
			require.Len(t, manifest.Layers, 1)
			require.Equal(t, []string{"blobs/sha256/" + strings.TrimPrefix(manifest.Layers[0].Digest, "sha256:")}, docker[0].Layers)
			zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, manifest.Layers[0])))
			require.NoError(t, err)
			raw, err := io.ReadAll(zr)
			require.NoError(t, err)
			diff := sha256.Sum256(raw)
			require.Equal(t, []string{"sha256:" + hex.EncodeToString(diff[:])}, config.RootFS.DiffIDs)
			tr := tar.NewReader(bytes.NewReader(raw))
			bins := map[string][]byte{}
			for {
				h, err := tr.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
				require.Equal(t, byte(tar.TypeReg), h.Typeflag, h.Name)
				require.Equal(t, int64(0o755), h.Mode, h.Name)
				bins[h.Name], err = io.ReadAll(tr)
				require.NoError(t, err)
			}
			require.Len(t, bins, 2, "the layer holds the two binaries alone")
			pkg, _, _ := staticELF(t, bins["ome-quota-manager"], machine)
			require.Equal(t, "ome.io/quota-manager/cmd/ome-quota-manager", pkg)
			pkg, mod, version := staticELF(t, bins["secretreader-plugin"], machine)
			require.Equal(t, "sigs.k8s.io/cluster-inventory-api/cmd/secretreader-plugin", pkg)
			require.Equal(t, "sigs.k8s.io/cluster-inventory-api", mod)
			require.Equal(t, inventoryVersion, version)

			// The folder beside it is a build context for the guide's
			// docker build: the same Dockerfile and binary.
			df, err := os.ReadFile(filepath.Join(out, "image-"+arch, "Dockerfile"))
			require.NoError(t, err)
			require.Equal(t, "FROM scratch\nCOPY ome-quota-manager /ome-quota-manager\nCOPY secretreader-plugin /secretreader-plugin\nUSER 65532:65532\nENTRYPOINT [\"/ome-quota-manager\"]\n", string(df))
			for _, name := range []string{"ome-quota-manager", "secretreader-plugin"} {
				ctx, err := os.ReadFile(filepath.Join(out, "image-"+arch, name))
				require.NoError(t, err)
				require.Equal(t, bins[name], ctx, "the build context's %s is the image's", name)
			}
		})
	}
}
