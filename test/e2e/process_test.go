package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ome.io/quota-manager/test/localcluster"
)

// managerProc is one ome-quota-manager process, started the way a user
// runs it, with its log in a file.
type managerProc struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	log     string
	metrics int
	health  int
	done    chan struct{}
}

// Short lease timings, so that a handover takes seconds.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

func startManager(t *testing.T, name string, extra ...string) *managerProc {
	t.Helper()
	mp, err := localcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	hp, err := localcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := &managerProc{t: t, name: name, metrics: mp, health: hp, done: make(chan struct{}),
		log: filepath.Join(t.TempDir(), name+".log")}
	args := append([]string{
		"--mode=workload",
		"--kubeconfig=" + cluster.Kubeconfig,
		"--enrolled-namespaces=ml-serving",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", mp),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", hp),
		"--leader-election-namespace=ome",
		"--leader-election-identity=" + name,
		"--leader-election-lease-duration=" + leaseDuration.String(),
		"--leader-election-renew-deadline=" + renewDeadline.String(),
		"--leader-election-retry-period=" + retryPeriod.String(),
		"--capacity-report-interval=3s",
		"-v=2",
	}, extra...)
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(managerBin, args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("--- %s log (last lines) ---\n%s", name, p.tail(40))
		}
	})
	p.waitReady()
	return p
}

func (p *managerProc) waitReady() {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			p.t.Fatalf("%s exited before it was ready:\n%s", p.name, p.tail(30))
		default:
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", p.health))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.t.Fatalf("%s not ready after 60s:\n%s", p.name, p.tail(30))
}

// stop sends SIGTERM and waits for a clean exit.
func (p *managerProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// kill sends SIGKILL: no lease release, no clean-up.
func (p *managerProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *managerProc) tail(n int) string {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// metric sums every series of a metric family whose labels contain all of
// match (as name="value" text).
func (p *managerProc) metric(ctx context.Context, family string, match ...string) float64 {
	p.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", p.metrics), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("scraping %s: %v", p.name, err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
lines:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, family+"{") && !strings.HasPrefix(line, family+" ") {
			continue
		}
		for _, m := range match {
			if !strings.Contains(line, m) {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}
