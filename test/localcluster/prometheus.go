package localcluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Prometheus is a Prometheus server on loopback.
type Prometheus struct {
	// URL is its HTTP API's base, http://127.0.0.1:port.
	URL string
	// Log is the file its output goes to.
	Log  string
	cmd  *exec.Cmd
	done <-chan struct{}
}

// StartPrometheus starts the prometheus binary in binDir with its data in
// dir, scraping each target (host:port, plain HTTP /metrics) every
// interval, and waits until it is ready.
func StartPrometheus(ctx context.Context, binDir, dir string, interval time.Duration, targets ...string) (*Prometheus, error) {
	return StartPrometheusScraping(ctx, binDir, dir, interval, fmt.Sprintf(`  - job_name: ome-quota-manager
    static_configs:
      - targets: ['%s']
`, strings.Join(targets, "', '")))
}

// StartPrometheusScraping is StartPrometheus with the scrape_configs given
// as YAML (the list's items, indented by two spaces).
func StartPrometheusScraping(ctx context.Context, binDir, dir string, interval time.Duration, scrapeConfigs string) (*Prometheus, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: %s
  evaluation_interval: %s
scrape_configs:
%s`, interval, interval, scrapeConfigs)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	p := &Prometheus{URL: fmt.Sprintf("http://127.0.0.1:%d", port), Log: filepath.Join(dir, "prometheus.log")}
	p.cmd = exec.Command(filepath.Join(binDir, "prometheus"),
		"--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port))
	if p.done, err = startLogged(p.cmd, p.Log); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return nil, fmt.Errorf("prometheus exited at start:\n%s", tail(p.Log, 20))
		case <-ctx.Done():
			p.Stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		resp, err := http.Get(p.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
	}
	p.Stop()
	return nil, fmt.Errorf("prometheus was not ready within a minute:\n%s", tail(p.Log, 20))
}

// Stop ends the server with SIGTERM and waits for it (SIGKILL after 10 s).
func (p *Prometheus) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
