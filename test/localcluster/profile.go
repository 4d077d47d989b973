package localcluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// CPUProfile fetches a CPU profile of seconds from the manager, which must
// run with --profiling and plain HTTP metrics (as managerArgs starts it).
func (m *Manager) CPUProfile(ctx context.Context, seconds int) ([]byte, error) {
	url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", m.MetricsPort, seconds)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s (is the manager running with --profiling?)", url, resp.Status)
	}
	return data, err
}

// APIServerCPUProfile fetches a CPU profile of seconds from kube-apiserver,
// as a member of system:masters (its /debug/pprof).
func (c *Cluster) APIServerCPUProfile(ctx context.Context, seconds int) ([]byte, error) {
	return c.Kube.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(seconds)).Timeout(time.Duration(seconds)*time.Second + time.Minute).DoRaw(ctx)
}
