package localcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Pod runs the first container of a Deployment the chart installed as a
// process on this machine, the way a kubelet would run it in a pod: with
// its args and env, fieldRefs resolved, its ConfigMap, Secret and emptyDir
// volumes laid out in a folder of its own (each mount path's files under
// it, and the args that name a mount path pointing there), and the
// ServiceAccount's token as a kubeconfig. No kubelet runs here, so the
// files come from the objects in the cluster as the kubelet reads them.
type Pod struct {
	Cluster    *Cluster
	Deployment *appsv1.Deployment
	// Bin is the binary the container's command runs.
	Bin string
	// Kubeconfig holds the ServiceAccount's token, for --kubeconfig and
	// for the exec plugins the process runs (KUBECONFIG).
	Kubeconfig string
	// Image maps paths of the image (an exec plugin a mounted file names)
	// to files of this machine: the image's file system, laid out here.
	Image map[string]string
}

// PodPorts are the ports one replica serves on, on 127.0.0.1.
type PodPorts struct{ Metrics, Health, Webhook int }

// NewPodPorts picks free ports.
func NewPodPorts() (PodPorts, error) {
	var p PodPorts
	for _, port := range []*int{&p.Metrics, &p.Health, &p.Webhook} {
		var err error
		if *port, err = FreePort(); err != nil {
			return p, err
		}
	}
	return p, nil
}

// PodPath is where a file at path in the container of the replica name,
// launched with dir (Pod.Launch), is on this machine: under a mount path,
// where the volume is laid out.
func PodPath(dir, name, path string) string {
	return filepath.Join(dir, name+"-fs", path)
}

// Launch starts one replica, named name (its POD_NAME and so its
// identity), with its files and log under dir. It adds to the args only
// what a pod gets from its surroundings: the kubeconfig and the ports.
func (p *Pod) Launch(ctx context.Context, name, dir string, ports PodPorts) (*Manager, error) {
	spec := p.Deployment.Spec.Template.Spec
	c := spec.Containers[0]
	ns := p.Deployment.Namespace
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		local := PodPath(dir, name, vm.MountPath)
		if err := os.MkdirAll(local, 0o755); err != nil {
			return nil, err
		}
		for _, v := range spec.Volumes {
			if v.Name != vm.Name {
				continue
			}
			files, err := p.volumeFiles(ctx, ns, v)
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			for file, data := range files {
				for image, here := range p.Image {
					data = strings.ReplaceAll(data, image, here)
				}
				if err := os.WriteFile(filepath.Join(local, file), []byte(data), 0o600); err != nil {
					return nil, err
				}
			}
		}
		mounts[vm.MountPath] = local
	}
	env := []string{"KUBECONFIG=" + p.Kubeconfig}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env = append(env, e.Name+"="+ns)
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env = append(env, e.Name+"="+name)
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		default:
			return nil, fmt.Errorf("env %s: no way to resolve %+v without a kubelet", e.Name, e.ValueFrom)
		}
	}
	args := make([]string, 0, len(c.Args)+6)
	for _, a := range c.Args {
		for _, e := range env {
			k, v, _ := strings.Cut(e, "=")
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		if flag, value, ok := strings.Cut(a, "="); ok {
			for mount, local := range mounts {
				if value == mount || strings.HasPrefix(value, mount+"/") {
					a = flag + "=" + local + strings.TrimPrefix(value, mount)
				}
			}
		}
		args = append(args, a)
	}
	args = append(args,
		"--kubeconfig="+p.Kubeconfig,
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports.Metrics),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports.Health),
		fmt.Sprintf("--webhook-port=%d", ports.Webhook),
		"--webhook-cert-hosts=127.0.0.1",
	)
	return LaunchProcess(p.Bin, name, dir, args, env, ports.Metrics, ports.Health)
}

// volumeFiles are the files a volume holds, by name: a ConfigMap's or a
// Secret's keys (or the items it projects), nothing for an emptyDir.
func (p *Pod) volumeFiles(ctx context.Context, ns string, v corev1.Volume) (map[string]string, error) {
	var data map[string]string
	var items []corev1.KeyToPath
	switch {
	case v.ConfigMap != nil:
		cm, err := p.Cluster.Kube.CoreV1().ConfigMaps(ns).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		data, items = cm.Data, v.ConfigMap.Items
	case v.Secret != nil:
		s, err := p.Cluster.Kube.CoreV1().Secrets(ns).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		data = map[string]string{}
		for k, b := range s.Data {
			data[k] = string(b)
		}
		items = v.Secret.Items
	case v.EmptyDir != nil:
		return nil, nil
	default:
		return nil, fmt.Errorf("a volume of a kind this test does not lay out")
	}
	if len(items) == 0 {
		return data, nil
	}
	out := map[string]string{}
	for _, it := range items {
		d, ok := data[it.Key]
		if !ok {
			return nil, fmt.Errorf("key %s is missing", it.Key)
		}
		out[it.Path] = d
	}
	return out, nil
}
