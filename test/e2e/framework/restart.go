package framework

import (
	"context"
	"fmt"
	"time"
)

// RestartAPIServer starts apiserver i again, after it was stopped or
// killed, with the arguments it last ran with: the same port, etcd and
// certificates, as a crashed apiserver restarted by its supervisor. It
// waits until /readyz answers ok to admin.
func (c *Cluster) RestartAPIServer(ctx context.Context, i int) error {
	a := c.APIServers[i]
	if exited, _ := a.Exited(); !exited {
		return fmt.Errorf("%s (pid %d) is still running; stop or kill it before restarting it", a.Name, a.Pid())
	}
	p, err := StartProcess(a.Name, a.LogPath, a.Args, ProcessOptions{Detach: c.opts.Detach})
	if err != nil {
		return err
	}
	// The cluster's Stop and logs follow the new process from now on.
	a.Process = p
	hc, err := httpsClient(c.PKI.CA.CertPEM, c.Admin)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := poll(ctx, a.Name+" ready again", 90*time.Second, 100*time.Millisecond, []*Process{p}, getOK(hc, a.URL+"/readyz")); err != nil {
		return err
	}
	c.Logf("e2e: %s restarted on %s, ready in %s", a.Name, a.URL, time.Since(start).Round(time.Millisecond))
	return nil
}
