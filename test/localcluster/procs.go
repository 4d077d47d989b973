package localcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startLogged starts cmd with its output, standard and error, in the file
// log, and ties it to this process: it is killed when this process dies,
// whatever ends it. The channel is closed once cmd has exited and its log
// is closed.
func startLogged(cmd *exec.Cmd, log string) (<-chan struct{}, error) {
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	return done, nil
}

// Processes finds the cluster's own processes in /proc, by its folder in
// their command lines: "etcd", "kube-apiserver" and "kueue", each with its
// pid. The benchmarks read their CPU time per write.
func (c *Cluster) Processes() map[string]int {
	out := map[string]int{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmd), c.Dir) {
			continue
		}
		exe := filepath.Base(strings.SplitN(string(cmd), "\x00", 2)[0])
		if exe == "etcd" || exe == "kube-apiserver" || exe == "kueue" {
			out[exe] = pid
		}
	}
	return out
}

// RSS reads a process's resident set size, in bytes, from /proc.
func RSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			kb, err := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for %d", pid)
}

// CPUTime reads a process's user and system CPU time from /proc (USER_HZ,
// 10 ms steps).
func CPUTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100, nil // USER_HZ is 100 on Linux
}

// CPUTimes reads each named process's CPU time; one that is gone is left
// out.
func CPUTimes(pids map[string]int) map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, pid := range pids {
		if t, err := CPUTime(pid); err == nil {
			out[name] = t
		}
	}
	return out
}

// Quiesce waits until the processes together use under 10% of a core over
// 2 s, at most limit, and returns how long it waited. A benchmark calls it
// before it measures: Kueue goes on reconciling a tree just built, or
// deleting one, well after the API server has answered, and writes timed
// meanwhile would share the cores with that work.
func Quiesce(ctx context.Context, pids map[string]int, limit time.Duration) time.Duration {
	sum := func() (t time.Duration) {
		for _, d := range CPUTimes(pids) {
			t += d
		}
		return t
	}
	start := time.Now()
	for ctx.Err() == nil && time.Since(start) < limit {
		c0 := sum()
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
		if sum()-c0 < 200*time.Millisecond {
			break
		}
	}
	return time.Since(start)
}
