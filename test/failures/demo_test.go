package failures

import (
	"bytes"
	"io"
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
	"ome.io/quota-manager/test/testutil"
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
		stopDemo(cmd, stdin, done)
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

// TestDemoFleet runs `make demo-fleet` on a terminal until it is up, runs
// every command it prints, as printed, with the environment it says to
// export (each one listed in the README's section on it, too): the tree
// on the plane and on each member, Kueue's queues, the plugin's tree and
// status, and a Node added on west that moves team-speech's Proportional
// shares. Then Ctrl-C stops everything it started and removes its files.
func TestDemoFleet(t *testing.T) {
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("util-linux's script is not installed")
	}
	root, err := localcluster.RepoRoot()
	require.NoError(t, err)
	readme, err := os.ReadFile(root + "/README.md")
	require.NoError(t, err)
	cmd := exec.Command("script", "--quiet", "--flush", "--return", "--command", "make demo-fleet", "/dev/null")
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	started := time.Now()
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		stopDemo(cmd, stdin, done)
		if t.Failed() {
			t.Logf("--- make demo-fleet ---\n%s", out.String())
		}
	})
	deadline := time.After(8 * time.Minute)
	for !strings.Contains(out.String(), "Press Ctrl-C to stop it") {
		select {
		case <-done:
			t.Fatalf("make demo-fleet ended before it was up: %v", waitErr)
		case <-deadline:
			t.Fatal("make demo-fleet was not up after 8 minutes")
		case <-time.After(500 * time.Millisecond):
		}
	}
	t.Logf("make demo-fleet was up in %s", time.Since(started).Round(time.Second))
	text := strings.ReplaceAll(out.String(), "\r\n", "\n")
	var exports, commands []string
	for _, line := range strings.Split(text, "\n") {
		switch l := strings.TrimSpace(line); {
		case strings.HasPrefix(l, "export "):
			exports = append(exports, l)
		case strings.HasPrefix(l, "kubectl "):
			commands = append(commands, l)
		}
	}
	require.Len(t, exports, 2, "the demo says what to export:\n%s", text)
	require.NotEmpty(t, commands)
	env := strings.Join(exports, "\n") + "\n"
	run := func(command string) string {
		t.Helper()
		c := exec.Command("bash", "-euo", "pipefail", "-c", env+command)
		b, err := c.CombinedOutput()
		require.NoError(t, err, "%s:\n%s", command, b)
		return string(b)
	}
	// What each command shows, once the fleet has settled.
	want := map[string][]string{
		"kubectl --context plane get aq":                          {"team-speech   ClusterQueue   research   12", "team-vision   ClusterQueue   research   10"},
		"kubectl --context east get aq":                           {"team-speech   ClusterQueue   research   8", "team-vision   ClusterQueue   research   8"},
		"kubectl --context west get aq":                           {"team-speech   ClusterQueue   research   4", "team-vision   ClusterQueue   research   2"},
		"kubectl --context east get clusterqueues.kueue.x-k8s.io": {"team-speech   research", "team-vision   research"},
		"kubectl ome quota tree --context plane":                  {"shares east=8 west=4", "shares east=8 west=2"},
		"kubectl ome quota status team-speech --context plane":    {"east: Matches", "west: Matches"},
	}
	applied := false
	for _, c := range commands {
		command, _, _ := strings.Cut(c, "   #")
		command = strings.TrimSpace(command)
		// The README says so too.
		require.Contains(t, string(readme), strings.ReplaceAll(command, root+"/", ""), "the README's demo-fleet section lacks %q", command)
		if applied && command == "kubectl ome quota tree --context plane" {
			// West's new Node moved team-speech's shares: 12 over 16 and 16.
			testutil.Eventually(t, time.Minute, func() string {
				if got := run(command); !strings.Contains(got, "shares east=6 west=6") {
					return "after the Node was added:\n" + got
				}
				return ""
			})
			continue
		}
		got := run(command)
		for _, w := range want[command] {
			require.Contains(t, testutil.Normalize(got), testutil.Normalize(w), command)
		}
		if strings.Contains(command, " apply -f ") {
			applied = true
		}
	}
	require.True(t, applied, "the demo prints no command that adds a Node")

	dirs := regexp.MustCompile(`/[^ \n]*ome-localcluster-[^ \n/,]*`).FindAllString(text, -1)
	_, err = stdin.Write([]byte{0x03}) // Ctrl-C
	require.NoError(t, err)
	select {
	case <-done:
		require.NoError(t, waitErr, "make demo-fleet did not exit 0 after Ctrl-C")
	case <-time.After(2 * time.Minute):
		t.Fatal("make demo-fleet did not stop within 2 minutes of Ctrl-C")
	}
	text = out.String()
	require.NotContains(t, text, "make: ***")
	require.Contains(t, text, "stopped three control planes (etcd, kube-apiserver), Kueue on east and west, and the three ome-quota-managers; removed ")
	for _, d := range dirs {
		_, err := os.Stat(d)
		require.True(t, os.IsNotExist(err), "%s is still there", d)
	}
	_, err = os.Stat(root + "/.cache/localcluster/fleet")
	require.True(t, os.IsNotExist(err), "the demo's folder is still there")
	left, _ := exec.Command("pgrep", "-af", "ome-localcluster-|/.cache/localcluster/fleet/").Output()
	for _, d := range dirs {
		require.NotContains(t, string(left), d, "a process of the demo is still running")
	}
}

// stopDemo stops a demo that a failed test left running the way a user
// does, with Ctrl-C, so that it stops its control planes and removes
// their folders; it kills the demo only if that has not ended it within
// a minute.
func stopDemo(cmd *exec.Cmd, stdin io.Writer, done <-chan struct{}) {
	select {
	case <-done:
		return
	default:
	}
	_, _ = stdin.Write([]byte{0x03})
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
	}
}
