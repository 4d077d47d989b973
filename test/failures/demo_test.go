package failures

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"ome.io/quota-manager/test/localcluster"
)

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDemoStopsCleanlyOnCtrlC runs `make demo` on a terminal (a pseudo
// terminal from util-linux's script) and presses Ctrl-C once it is up: the
// demo stops everything, says what it removed, and make exits 0 instead of
// "make: *** [Makefile:21: demo] Error 1".
func TestDemoStopsCleanlyOnCtrlC(t *testing.T) {
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("util-linux's script is not installed")
	}
	root, err := localcluster.RepoRoot()
	require.NoError(t, err)
	cmd := exec.Command("script", "--quiet", "--flush", "--return", "--command", "make demo", "/dev/null")
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	done := make(chan struct{}) // closed once script has exited, with waitErr
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("--- make demo ---\n%s", out.String())
		}
	})

	deadline := time.After(5 * time.Minute)
	for !strings.Contains(out.String(), "Press Ctrl-C to stop it") {
		select {
		case <-done:
			t.Fatalf("make demo ended before it was up: %v", waitErr)
		case <-deadline:
			t.Fatal("make demo was not up after 5 minutes")
		case <-time.After(500 * time.Millisecond):
		}
	}
	dirs := regexp.MustCompile(`/[^ \n]*ome-localcluster-[^ \n/]*`).FindAllString(out.String(), -1)
	_, err = stdin.Write([]byte{0x03}) // Ctrl-C
	require.NoError(t, err)
	select {
	case <-done:
		require.NoError(t, waitErr, "make demo did not exit 0 after Ctrl-C")
	case <-time.After(2 * time.Minute):
		t.Fatal("make demo did not stop within 2 minutes of Ctrl-C")
	}
	text := out.String()
	require.NotContains(t, text, "make: ***")
	require.Regexp(t, `stopped etcd and kube-apiserver, Kueue, ome-quota-manager; removed /\S*ome-localcluster-\S* \(their data, certificates and logs\) and \S*kubeconfig`, text)
	require.NotEmpty(t, dirs)
	for _, d := range dirs {
		_, err := os.Stat(d)
		require.True(t, os.IsNotExist(err), "%s is still there", d)
	}
}
