// Command pause is PID 1 of a pod sandbox: it holds the pod's namespaces open, reaps the
// zombies re-parented to it, and exits on SIGINT or SIGTERM, like Kubernetes' pause.c.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
