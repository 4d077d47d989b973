package localcluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	kueueconfig "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"
	"sigs.k8s.io/yaml"

	quotaclient "ome.io/quota-manager/api/client"
	aqtyped "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
)

// Options say what to start.
type Options struct {
	// Kueue starts Kueue's controller manager beside the apiserver, with its
	// webhooks registered, and waits until it admits requests.
	Kueue bool
	// APIServerArgs are extra kube-apiserver flags, as name=value.
	APIServerArgs map[string]string
	// KueueFeatureGates are set in Kueue's Configuration, beside
	// VisibilityOnDemand: false.
	KueueFeatureGates map[string]bool
	// KueueDeviceClassMappings are Kueue's resources.deviceClassMappings.
	KueueDeviceClassMappings []kueueconfig.DeviceClassMapping
	// KueuePods turns on Kueue's pod integration as well as batch/job: its
	// pod webhooks see every Pod created, and gate those labelled with a
	// queue until their Workload is admitted.
	KueuePods bool
	// AQCRD, when set, is installed in place of the project's
	// AcceleratorQuota CRD (aqtest.OMECRD builds OME's).
	AQCRD *apiextensionsv1.CustomResourceDefinition
	// Namespaces are created once the control plane is up (RunTests).
	Namespaces []string
	// Etcd, when set, is the client URL of an etcd already running (another
	// cluster's, EtcdURL) that the new kube-apiserver stores in, under
	// EtcdPrefix, in place of an etcd of its own: many API servers on one
	// etcd cost less than as many etcds. Kueue cannot be started with it.
	Etcd       *url.URL
	EtcdPrefix string
}

// Cluster is a running control plane.
type Cluster struct {
	// Dir holds every file of this cluster; Stop removes it.
	Dir string
	// BinDir holds the built binaries.
	BinDir string
	// Config reaches the apiserver as a member of system:masters.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file with the same identity.
	Kubeconfig string
	// Kube and Kueue are typed clients on Config; AQs is an
	// AcceleratorQuota client on it.
	Kube  kubernetes.Interface
	Kueue kueueclient.Interface
	AQs   aqtyped.AcceleratorQuotaInterface
	// ManagerBin is the ome-quota-manager binary built from this checkout
	// for the test package (RunTests with withManager), or empty.
	ManagerBin string
	// KueueConfigPath is the Configuration file Kueue runs with.
	KueueConfigPath string

	opts Options
	env  *envtest.Environment
	// onEtcd is the kube-apiserver alone, on Options.Etcd; nil when env
	// runs its own etcd and API server.
	onEtcd    *envtest.ControlPlane
	kueue     *exec.Cmd
	kueueDone chan struct{}
	stopped   bool
}

var quietEnvtest sync.Once

// tmpdirMu serializes the part of Start that sets TMPDIR.
var tmpdirMu sync.Mutex

// Start starts etcd and kube-apiserver on free loopback ports, installs the
// AcceleratorQuota CRD and Kueue's CRDs, and with opts.Kueue also Kueue.
// On error, everything already started is stopped and removed.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	// envtest logs through controller-runtime's logger, which complains
	// with a stack trace when a process (make perf, which starts a fresh
	// control plane for each run) first uses it late and unset. Its
	// failures come back as errors.
	quietEnvtest.Do(func() { crlog.SetLogger(logr.Discard()) })
	bin, err := EnsureBinaries(ctx)
	if err != nil {
		return nil, err
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	// The folder is made under TMPDIR as this process's environment has
	// it, which another Start sets for a while (below): take turns.
	tmpdirMu.Lock()
	dir, err := os.MkdirTemp("", "ome-localcluster-")
	tmpdirMu.Unlock()
	if err != nil {
		return nil, err
	}
	c = &Cluster{Dir: dir, BinDir: bin, opts: opts}
	defer func() {
		if err != nil {
			_ = c.Stop()
			c = nil
		}
	}()

	// envtest starts the binaries it finds in this folder. Each is a wrapper
	// that asks the kernel to kill it when its parent dies, so a test binary
	// that is killed (a timeout, SIGKILL) leaves no etcd or apiserver behind.
	wrapped := filepath.Join(dir, "bin")
	if err := os.MkdirAll(wrapped, 0o755); err != nil {
		return c, err
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kubectl"} {
		script := fmt.Sprintf("#!/bin/sh\nexec setpriv --pdeathsig KILL %q \"$@\"\n", filepath.Join(bin, name))
		if name == "kubectl" {
			script = fmt.Sprintf("#!/bin/sh\nexec %q \"$@\"\n", filepath.Join(bin, name))
		}
		if err := os.WriteFile(filepath.Join(wrapped, name), []byte(script), 0o755); err != nil {
			return c, err
		}
	}

	c.env = &envtest.Environment{
		BinaryAssetsDirectory: wrapped,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd"), filepath.Join(bin, "kueue-crds")},
		ErrorIfCRDPathMissing: true,
	}
	if opts.AQCRD != nil {
		c.env.CRDDirectoryPaths = []string{filepath.Join(root, "config", "crd", "ome.io_admissionledgers.yaml"), filepath.Join(bin, "kueue-crds")}
		c.env.CRDs = []*apiextensionsv1.CustomResourceDefinition{opts.AQCRD}
	}
	// TMPDIR keeps envtest's own folders (etcd data, certificates) inside Dir.
	// envtest reads it through os.MkdirTemp at start. It is the process's
	// environment: control planes started at once take turns here.
	tmpdirMu.Lock()
	prevTmp, hadTmp := os.LookupEnv("TMPDIR")
	tmpdirHeld := true
	// release puts TMPDIR back and lets the next Start have it, once.
	release := func() {
		if !tmpdirHeld {
			return
		}
		tmpdirHeld = false
		if hadTmp {
			_ = os.Setenv("TMPDIR", prevTmp)
		} else {
			_ = os.Unsetenv("TMPDIR")
		}
		tmpdirMu.Unlock()
	}
	defer release()
	if err := os.Setenv("TMPDIR", dir); err != nil {
		return c, err
	}
	api := c.env.ControlPlane.GetAPIServer()
	for k, v := range opts.APIServerArgs {
		api.Configure().Set(k, v)
	}
	if opts.Kueue {
		mut, val, err := kueueWebhooks(filepath.Join(bin, "kueue-webhooks.yaml"), opts.KueuePods)
		if err != nil {
			return c, err
		}
		c.env.WebhookInstallOptions = envtest.WebhookInstallOptions{
			MutatingWebhooks:   mut,
			ValidatingWebhooks: val,
			LocalServingHost:   "127.0.0.1",
		}
	}
	var user *envtest.AuthenticatedUser
	if opts.Etcd != nil {
		// Nothing below writes under TMPDIR: the API server's folder is
		// named.
		release()
		user, err = c.startOnEtcd(wrapped)
	} else if _, err = c.env.Start(); err == nil {
		user, err = c.env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	}
	if err == nil {
		c.Config = rest.CopyConfig(user.Config())
		var kc []byte
		if kc, err = user.KubeConfig(); err == nil {
			c.Kubeconfig = filepath.Join(dir, "kubeconfig")
			err = os.WriteFile(c.Kubeconfig, kc, 0o600)
		}
	}
	release()
	if err != nil {
		return c, fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	c.Config.QPS, c.Config.Burst = 200, 400
	if c.Kube, err = kubernetes.NewForConfig(c.Config); err != nil {
		return c, err
	}
	if c.Kueue, err = kueueclient.NewForConfig(c.Config); err != nil {
		return c, err
	}
	if c.AQs, err = quotaclient.AcceleratorQuotas(c.Config); err != nil {
		return c, err
	}
	if opts.Kueue {
		if err := c.startKueue(ctx); err != nil {
			return c, err
		}
	}
	return c, nil
}

// startOnEtcd starts kube-apiserver alone on Options.Etcd, under
// Options.EtcdPrefix, then has envtest install the CRDs on it as on an
// existing cluster.
func (c *Cluster) startOnEtcd(wrapped string) (*envtest.AuthenticatedUser, error) {
	if c.opts.Kueue || c.opts.EtcdPrefix == "" {
		return nil, fmt.Errorf("a control plane on a shared etcd needs an etcd prefix of its own, and runs no Kueue")
	}
	api := &envtest.APIServer{Path: filepath.Join(wrapped, "kube-apiserver"), EtcdURL: c.opts.Etcd,
		CertDir: filepath.Join(c.Dir, "apiserver"), StartTimeout: time.Minute, StopTimeout: time.Minute}
	if err := os.MkdirAll(api.CertDir, 0o700); err != nil {
		return nil, err
	}
	for k, v := range c.opts.APIServerArgs {
		api.Configure().Set(k, v)
	}
	api.Configure().Set("etcd-prefix", c.opts.EtcdPrefix)
	c.onEtcd = &envtest.ControlPlane{APIServer: api}
	if err := api.Start(); err != nil {
		return nil, err
	}
	admin, err := c.onEtcd.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	existing := true
	c.env.UseExistingCluster, c.env.Config = &existing, rest.CopyConfig(admin.Config())
	c.env.Config.QPS, c.env.Config.Burst = 1000, 2000
	_, err = c.env.Start()
	return admin, err
}

// EtcdURL is the client URL of the cluster's etcd, for Options.Etcd.
func (c *Cluster) EtcdURL() *url.URL {
	if c.onEtcd != nil {
		return c.opts.Etcd
	}
	return c.env.ControlPlane.Etcd.URL
}

// kueueWebhooks reads Kueue's webhook manifests and keeps the webhooks for
// Kueue's own objects and batch Jobs, and with pods those for Pods: the
// others (Deployments, ...) belong to integrations this harness does not
// enable, and registering them would make every such write fail closed.
func kueueWebhooks(path string, pods bool) ([]*admissionregistrationv1.MutatingWebhookConfiguration, []*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("reading Kueue's webhooks: %w", err)
	}
	keep := func(rules []admissionregistrationv1.RuleWithOperations) bool {
		for _, r := range rules {
			for _, g := range r.APIGroups {
				pod := g == "" && slices.Equal(r.Resources, []string{"pods"})
				if g != "kueue.x-k8s.io" && g != "batch" && !(pods && pod) {
					return false
				}
			}
		}
		return true
	}
	var muts []*admissionregistrationv1.MutatingWebhookConfiguration
	var vals []*admissionregistrationv1.ValidatingWebhookConfiguration
	for _, doc := range strings.Split(string(data), "\n---") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			m := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict([]byte(doc), m); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", path, err)
			}
			m.Webhooks = slices.DeleteFunc(m.Webhooks, func(h admissionregistrationv1.MutatingWebhook) bool { return !keep(h.Rules) })
			muts = append(muts, m)
		case "ValidatingWebhookConfiguration":
			v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", path, err)
			}
			v.Webhooks = slices.DeleteFunc(v.Webhooks, func(h admissionregistrationv1.ValidatingWebhook) bool { return !keep(h.Rules) })
			vals = append(vals, v)
		}
	}
	if len(muts) == 0 || len(vals) == 0 {
		return nil, nil, fmt.Errorf("%s holds no webhook configurations", path)
	}
	return muts, vals, nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// outside the kernel's range of ephemeral ports: a port from that range
// can be taken, between this call and the listen it is for, as the local
// end of any outgoing connection (the tests make thousands), and the
// listen then fails with "address already in use".
func FreePort() (int, error) {
	lo, hi := 10000, 32767 // below Linux's default ephemeral range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var elo, ehi int
		if _, err := fmt.Sscan(string(b), &elo, &ehi); err == nil {
			if elo-1 > 10000+1000 {
				lo, hi = 10000, elo-1
			} else if ehi+1 < 64000 {
				lo, hi = ehi+1, 65535
			}
		}
	}
	for range 200 {
		p := lo + rand.IntN(hi-lo+1)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("no free port between %d and %d after 200 tries", lo, hi)
}

// Stop stops every process and removes Dir. It is safe to call twice.
func (c *Cluster) Stop() error {
	if c == nil || c.stopped {
		return nil
	}
	c.stopped = true
	var errs []error
	if c.kueue != nil && c.kueue.Process != nil {
		_ = c.kueue.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.kueueDone:
		case <-time.After(10 * time.Second):
			_ = c.kueue.Process.Kill()
			<-c.kueueDone
		}
	}
	if c.env != nil {
		if err := c.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping kube-apiserver and etcd: %w", err))
		}
	}
	if c.onEtcd != nil {
		if err := c.onEtcd.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping kube-apiserver: %w", err))
		}
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Kubectl runs the built kubectl against the cluster and returns its
// standard output, or an error holding its standard error.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	out, stderr, err := c.KubectlOutput(ctx, args...)
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr)
	}
	return out, nil
}

// KubectlOutput runs kubectl and returns both of its outputs.
func (c *Cluster) KubectlOutput(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	return c.KubectlInput(ctx, "", args...)
}

// KubectlInput runs kubectl with stdin as its standard input ("-f -").
func (c *Cluster) KubectlInput(ctx context.Context, stdin string, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// EnsureNamespace creates a namespace if it does not exist.
func (c *Cluster) EnsureNamespace(ctx context.Context, name string) error {
	_, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// EnsureNamespaces creates, in order, each namespace that does not exist,
// and stops at the first error.
func (c *Cluster) EnsureNamespaces(ctx context.Context, names ...string) error {
	for _, name := range names {
		if err := c.EnsureNamespace(ctx, name); err != nil {
			return err
		}
	}
	return nil
}
