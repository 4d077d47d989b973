package localcluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"ome.io/quota-manager/test/testutil/promtext"
)

// BuildManager builds cmd/ome-quota-manager into dir and returns its path.
func BuildManager(ctx context.Context, dir string) (string, error) {
	return build(ctx, dir, "ome-quota-manager", "./cmd/ome-quota-manager")
}

// BuildSecretReader builds the secret-reader credential plugin of the
// cluster inventory API (the module go.mod requires) into dir and returns
// its path: what a plane's credential providers file runs to reach a
// ClusterProfile whose token is in a Secret.
func BuildSecretReader(ctx context.Context, dir string) (string, error) {
	return build(ctx, dir, "secretreader-plugin", "sigs.k8s.io/cluster-inventory-api/cmd/secretreader-plugin")
}

// BuildPlugin builds cmd/kubectl-ome (kubectl ome) into dir and returns
// its path.
func BuildPlugin(ctx context.Context, dir string) (string, error) {
	return build(ctx, dir, "kubectl-ome", "./cmd/kubectl-ome")
}

// BuiltDirEnv names a folder that already holds the binaries build makes
// (ome-quota-manager, secretreader-plugin, kubectl-ome), built from this
// tree: hack/test.sh builds them once for the whole run, so that each test
// package copies them instead of linking its own.
const BuiltDirEnv = "OME_BUILT_DIR"

// build builds the package pkg of the project's module into dir/name, or
// takes it from $OME_BUILT_DIR when that folder holds it.
func build(ctx context.Context, dir, name, pkg string) (string, error) {
	out := filepath.Join(dir, name)
	if built := os.Getenv(BuiltDirEnv); built != "" {
		src := filepath.Join(built, name)
		if _, err := os.Stat(src); err == nil {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return "", err
			}
			// A copy, not a link: a test may change its own binary.
			if err := os.Remove(out); err != nil && !os.IsNotExist(err) {
				return "", err
			}
			if err := copyExecutable(src, out); err != nil {
				return "", fmt.Errorf("copying %s from $%s: %w", name, BuiltDirEnv, err)
			}
			return out, nil
		}
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w", name, err)
	}
	return out, nil
}

// copyExecutable copies the file src to dst, executable.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Manager is one ome-quota-manager process, started the way a user runs it,
// with its log in a file. It dies with the process that started it.
type Manager struct {
	Name        string
	Log         string
	MetricsPort int
	HealthPort  int
	cmd         *exec.Cmd
	done        <-chan struct{}
}

// ManagerArgs are the flags StartManager passes before the caller's own:
// the cluster's kubeconfig, loopback ports, and the Lease in namespace
// ome. Metrics are left at the default, plain HTTP, which Metric scrapes.
func (c *Cluster) managerArgs(name string, metrics, health int) []string {
	return []string{
		"--mode=workload",
		"--kubeconfig=" + c.Kubeconfig,
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metrics),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", health),
		"--leader-election-namespace=ome",
		"--leader-election-identity=" + name,
	}
}

// StartManager starts the binary bin against the cluster, with its log in
// logDir, and waits until /readyz answers. Later flags override earlier ones.
func (c *Cluster) StartManager(ctx context.Context, bin, name, logDir string, extra ...string) (*Manager, error) {
	return c.StartManagerEnv(ctx, bin, name, logDir, nil, extra...)
}

// StartManagerEnv is StartManager with env added to the process's
// environment.
func (c *Cluster) StartManagerEnv(ctx context.Context, bin, name, logDir string, env []string, extra ...string) (*Manager, error) {
	m, err := c.launchManager(ctx, bin, name, logDir, env, extra...)
	if err != nil {
		return nil, err
	}
	if err := m.waitReady(ctx, time.Minute); err != nil {
		m.Kill()
		return nil, fmt.Errorf("%w\n--- last lines of %s ---\n%s", err, m.Log, m.Tail(30))
	}
	return m, nil
}

// LaunchManager is StartManager without the wait for readiness, for a test
// of a replica that must not become ready.
func (c *Cluster) LaunchManager(ctx context.Context, bin, name, logDir string, extra ...string) (*Manager, error) {
	return c.launchManager(ctx, bin, name, logDir, nil, extra...)
}

// LaunchManagerEnv is LaunchManager with env added to the process's
// environment.
func (c *Cluster) LaunchManagerEnv(ctx context.Context, bin, name, logDir string, env []string, extra ...string) (*Manager, error) {
	return c.launchManager(ctx, bin, name, logDir, env, extra...)
}

func (c *Cluster) launchManager(ctx context.Context, bin, name, logDir string, env []string, extra ...string) (*Manager, error) {
	if err := c.EnsureNamespace(ctx, "ome"); err != nil {
		return nil, err
	}
	mp, err := FreePort()
	if err != nil {
		return nil, err
	}
	hp, err := FreePort()
	if err != nil {
		return nil, err
	}
	return LaunchProcess(bin, name, logDir, append(c.managerArgs(name, mp, hp), extra...), env, mp, hp)
}

// LaunchProcess starts bin with exactly args, and env added to this
// process's environment, as a container would run it: nothing is added.
// metricsPort and healthPort are the ports args tell it to serve on (127.0.0.1).
// Its log goes to logDir/name.log; it dies with the process that started it.
func LaunchProcess(bin, name, logDir string, args, env []string, metricsPort, healthPort int) (*Manager, error) {
	m := &Manager{Name: name, MetricsPort: metricsPort, HealthPort: healthPort, Log: filepath.Join(logDir, name+".log")}
	m.cmd = exec.Command(bin, args...)
	m.cmd.Env = append(os.Environ(), env...)
	var err error
	if m.done, err = startLogged(m.cmd, m.Log); err != nil {
		return nil, err
	}
	return m, nil
}

// WaitReady waits until /readyz answers 200, the process exits, or timeout.
func (m *Manager) WaitReady(ctx context.Context, timeout time.Duration) error {
	if err := m.waitReady(ctx, timeout); err != nil {
		return fmt.Errorf("%w\n--- last lines of %s ---\n%s", err, m.Log, m.Tail(30))
	}
	return nil
}

func (m *Manager) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-m.done:
			return fmt.Errorf("%s exited before it was ready (%v)", m.Name, m.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if m.Ready() {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s", m.Name, timeout)
}

// Ready reports whether /readyz answers 200.
func (m *Manager) Ready() bool {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", m.HealthPort))
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Done is closed when the process has exited.
func (m *Manager) Done() <-chan struct{} { return m.done }

// ExitCode is the process's exit code, once Done.
func (m *Manager) ExitCode() int { return m.cmd.ProcessState.ExitCode() }

// Stop sends SIGTERM and waits for the exit (SIGKILL after 15s).
func (m *Manager) Stop() {
	select {
	case <-m.done:
		return
	default:
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(15 * time.Second):
		m.Kill()
	}
}

// Kill sends SIGKILL: no lease release, no clean-up.
func (m *Manager) Kill() {
	_ = m.cmd.Process.Kill()
	<-m.done
}

// Tail returns the last n lines of the log.
func (m *Manager) Tail(n int) string { return tail(m.Log, n) }

// Metric sums the series of a metric family whose labels include every
// one of match (as name="value").
func (m *Manager) Metric(ctx context.Context, family string, match ...string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", m.MetricsPort), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scraping %s: %w", m.Name, err)
	}
	defer resp.Body.Close()
	f, err := promtext.Parse(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("scraping %s: %w", m.Name, err)
	}
	return f.Sum(family, match...), nil
}

// Pid is the process id, for reading its CPU time and memory from /proc.
func (m *Manager) Pid() int { return m.cmd.Process.Pid }
