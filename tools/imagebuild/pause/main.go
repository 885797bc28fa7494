// Command pause is the pod sandbox ("pause") image's process, built here so
// the node pulls nothing from outside: it holds the pod's namespaces open,
// reaps the children a shared PID namespace gives it, and exits 0 on
// SIGTERM or SIGINT, as registry.k8s.io/pause does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		// Reap every child that exited; WNOHANG so a live child does not block.
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
