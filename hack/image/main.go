// Command image assembles the quota manager's container image without a
// Docker daemon: the Dockerfile's image (FROM scratch, the static binary at
// /ome-quota-manager, the ClusterProfile secret-reader credential plugin at
// /secretreader-plugin, USER 65532:65532, the manager as the entrypoint),
// written as one tarball that holds both an OCI image layout (index.json,
// oci-layout, blobs/) and Docker's manifest.json, so that `docker load`,
// `podman load` and `crane push` all accept it.
//
//	go run . -binary ../../bin/image-amd64/ome-quota-manager \
//	    -plugin ../../bin/image-amd64/secretreader-plugin -arch amd64 \
//	    -tag registry.example.com/ome/ome-quota-manager:dev -o ../../bin/ome-quota-manager-amd64.tar
//
// It is its own module so that go-containerregistry's dependencies stay out
// of the main module's graph.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// The image's fixed shape, as the guide's Dockerfile writes it.
const (
	binaryPath = "/ome-quota-manager"
	pluginPath = "/secretreader-plugin"
	user       = "65532:65532"
)

func main() {
	bin := flag.String("binary", "", "the static ome-quota-manager binary for linux/ARCH")
	plugin := flag.String("plugin", "", "the static secretreader-plugin binary for linux/ARCH (sigs.k8s.io/cluster-inventory-api/cmd/secretreader-plugin)")
	arch := flag.String("arch", "amd64", "the binary's GOARCH: amd64 or arm64")
	tag := flag.String("tag", "ome-quota-manager:dev", "the image reference recorded in the tarball")
	out := flag.String("o", "", "the tarball to write")
	flag.Parse()
	if err := run(*bin, *plugin, *arch, *tag, *out); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(bin, plugin, arch, tag, out string) error {
	if bin == "" || plugin == "" || out == "" {
		return errors.New("-binary, -plugin and -o are required")
	}
	if arch != "amd64" && arch != "arm64" {
		return fmt.Errorf("-arch must be amd64 or arm64, got %q", arch)
	}
	img, err := build(arch, file{binaryPath, bin}, file{pluginPath, plugin})
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := write(f, img, tag); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := verify(tmp, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("the written tarball does not read back: %w", err)
	}
	return os.Rename(tmp, out)
}

// verify reads the tarball back the way crane does (Docker's
// manifest.json) and checks every digest and size against the image.
func verify(path string, want v1.Image) error {
	got, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		return err
	}
	if err := validate.Image(got); err != nil {
		return err
	}
	gd, err := got.ConfigName()
	if err != nil {
		return err
	}
	wd, err := want.ConfigName()
	if err != nil {
		return err
	}
	if gd != wd {
		return fmt.Errorf("config %s read back as %s", wd, gd)
	}
	return nil
}

// file is a binary of the image: where it goes, and where it is read from.
type file struct{ path, from string }

// build makes the image: one layer holding the binaries, and the config,
// whose entrypoint is the first binary.
func build(arch string, files ...file) (v1.Image, error) {
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	// A fixed time keeps the layer's digest reproducible.
	epoch := time.Unix(0, 0).UTC()
	for _, f := range files {
		data, err := os.ReadFile(f.from)
		if err != nil {
			return nil, err
		}
		if !bytes.HasPrefix(data, []byte("\x7fELF")) {
			return nil, fmt.Errorf("%s is not a Linux (ELF) binary: build it with GOOS=linux", f.from)
		}
		if err := tw.WriteHeader(&tar.Header{Name: f.path[1:], Mode: 0o755, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: epoch}
	cf.Config.User = user
	cf.Config.Entrypoint = []string{files[0].path}
	cf.Config.Cmd = nil
	cf.Config.Env = nil
	return mutate.ConfigFile(img, cf)
}

// write puts the image into w as an OCI layout plus Docker's manifest.json,
// both naming the same blobs.
func write(w io.Writer, img v1.Image, tag string) error {
	tw := tar.NewWriter(w)
	epoch := time.Unix(0, 0).UTC()
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}

	if err := add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     types.OCIImageIndex,
		"manifests": []map[string]any{{
			"mediaType":   types.OCIManifestSchema1,
			"digest":      digest.String(),
			"size":        len(manifest),
			"platform":    map[string]string{"os": cf.OS, "architecture": cf.Architecture},
			"annotations": map[string]string{"io.containerd.image.name": tag, "org.opencontainers.image.ref.name": tag},
		}},
	})
	if err != nil {
		return err
	}
	if err := add("index.json", index); err != nil {
		return err
	}
	if err := add(blob(digest), manifest); err != nil {
		return err
	}
	if err := add(blob(configName), config); err != nil {
		return err
	}
	var layerPaths []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		if err := add(blob(d), data); err != nil {
			return err
		}
		layerPaths = append(layerPaths, blob(d))
	}
	docker, err := json.Marshal([]map[string]any{{
		"Config":   blob(configName),
		"RepoTags": []string{tag},
		"Layers":   layerPaths,
	}})
	if err != nil {
		return err
	}
	if err := add("manifest.json", docker); err != nil {
		return err
	}
	return tw.Close()
}
