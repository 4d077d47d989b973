package localcluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/cert"
	kueueconfig "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/yaml"
)

// kueueConfig is a Kueue Configuration (v1beta2) that runs on loopback
// without a cluster network: no leader election, no internal certificate
// management (it waits for a kubelet to mount a Secret), certificates that
// the harness provides, and the batch/job integration (kueueExtraConfig
// adds pods).
const kueueConfig = `apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
`

// kueueExtraConfig is the part of Kueue's Configuration that Options
// decide: its feature gates (VisibilityOnDemand off, or it wants a
// visibility certificate and exits), its integrations and its DRA
// deviceClassMappings.
func (c *Cluster) kueueExtraConfig() ([]byte, error) {
	gates := map[string]bool{"VisibilityOnDemand": false}
	for k, v := range c.opts.KueueFeatureGates {
		gates[k] = v
	}
	frameworks := []string{"batch/job"}
	if c.opts.KueuePods {
		frameworks = append(frameworks, "pod")
	}
	extra := map[string]any{"featureGates": gates, "integrations": map[string]any{"frameworks": frameworks}}
	if len(c.opts.KueueDeviceClassMappings) > 0 {
		extra["resources"] = kueueconfig.Resources{DeviceClassMappings: c.opts.KueueDeviceClassMappings}
	}
	return yaml.Marshal(extra)
}

// startKueue runs Kueue's manager in a private mount namespace whose /etc is
// an overlay: Kueue reads a metrics certificate from a fixed path under
// /etc/kueue, and the overlay gives it one without touching the host.
func (c *Cluster) startKueue(ctx context.Context) error {
	if err := c.EnsureNamespace(ctx, "kueue-system"); err != nil {
		return err
	}
	kdir := filepath.Join(c.Dir, "kueue")
	for _, d := range []string{"upper", "work", "metrics"} {
		if err := os.MkdirAll(filepath.Join(kdir, d), 0o700); err != nil {
			return err
		}
	}
	crt, key, err := cert.GenerateSelfSignedCertKey("127.0.0.1", nil, nil)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(kdir, "metrics", "tls.crt"), crt, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(kdir, "metrics", "tls.key"), key, 0o600); err != nil {
		return err
	}
	health, err := FreePort()
	if err != nil {
		return err
	}
	wh := c.env.WebhookInstallOptions
	cfgPath := filepath.Join(kdir, "config.yaml")
	extra, err := c.kueueExtraConfig()
	if err != nil {
		return err
	}
	if err := os.WriteFile(cfgPath, append(fmt.Appendf(nil, kueueConfig, health, wh.LocalServingPort, wh.LocalServingCertDir), extra...), 0o600); err != nil {
		return err
	}
	c.KueueConfigPath = cfgPath
	script := `set -e
mount -t overlay overlay -o lowerdir=/etc,upperdir="$KDIR/upper",workdir="$KDIR/work" /etc
mkdir -p /etc/kueue/metrics/certs
cp "$KDIR/metrics/tls.crt" "$KDIR/metrics/tls.key" /etc/kueue/metrics/certs/
exec "$KUEUE" --config="$KDIR/config.yaml" --zap-log-level=2
`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "KDIR="+kdir, "KUEUE="+filepath.Join(c.BinDir, "kueue"), "KUBECONFIG="+c.Kubeconfig)
	logf, err := os.Create(filepath.Join(kdir, "kueue.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// Killed with the process that started it, whatever ends that process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting Kueue (needs root for its private mount namespace): %w", err)
	}
	c.kueue = cmd
	c.kueueDone = make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(c.kueueDone) }()

	if err := c.waitKueue(ctx, health); err != nil {
		return fmt.Errorf("%w\n--- last lines of %s ---\n%s", err, logf.Name(), tail(logf.Name(), 30))
	}
	return nil
}

// waitKueue waits until Kueue reports ready and its webhooks answer: a
// server-side dry-run create of a ResourceFlavor goes through them.
func (c *Cluster) waitKueue(ctx context.Context, health int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	probe := &kueuev1beta2.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "localcluster-probe"}}
	var last error
	for {
		select {
		case <-c.kueueDone:
			return fmt.Errorf("kueue exited before it was ready")
		case <-ctx.Done():
			return fmt.Errorf("kueue not ready after 2m: %v", last)
		case <-time.After(250 * time.Millisecond):
		}
		resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", health))
		if err != nil {
			last = err
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			last = fmt.Errorf("readyz: %s", resp.Status)
			continue
		}
		_, err = c.Kueue.KueueV1beta2().ResourceFlavors().Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err
			continue
		}
		return nil
	}
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(string(bytes.TrimRight(data, "\n")), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
