package framework

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a child process in its own process group, with stdout and
// stderr appended to one log file.
type Process struct {
	Name    string
	LogPath string
	Args    []string

	opts ProcessOptions

	mu      sync.Mutex // guards cmd, done and waitErr across a Restart
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// ProcessOptions say how to start a process.
type ProcessOptions struct {
	// Detach leaves the process running when the caller exits (`make up`).
	// Otherwise the kernel kills it when the caller dies, so a test binary
	// that panics or times out leaves nothing behind.
	Detach bool
	Env    []string // added to the caller's environment
	Dir    string
}

// StartProcess starts argv with its output in logPath.
func StartProcess(name, logPath string, argv []string, o ProcessOptions) (*Process, error) {
	p := &Process{Name: name, LogPath: logPath, Args: argv, opts: o}
	if err := p.start(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Process) start() error {
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", p.Name, err)
	}
	defer logFile.Close() // the child holds its own descriptor
	fmt.Fprintf(logFile, "### %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(p.Args, " "))

	cmd := exec.Command(p.Args[0], p.Args[1:]...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Dir = p.opts.Dir
	cmd.Env = append(os.Environ(), p.opts.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !p.opts.Detach {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.waitErr = cmd, done, nil
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		if p.done == done {
			p.waitErr = err
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Restart starts an exited process again with the same arguments, the same
// log file (appended to) and so the same ports: a crashed apiserver or
// webhook replica coming back where the load balancer expects it.
func (p *Process) Restart() error {
	if exited, _ := p.Exited(); !exited {
		return fmt.Errorf("restart %s: still running (pid %d)", p.Name, p.Pid())
	}
	return p.start()
}

// Kill sends SIGKILL to the process group, as a crash or an OOM kill would
// end it, and waits until it is gone.
func (p *Process) Kill() {
	if exited, _ := p.Exited(); exited {
		return
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	<-p.doneChan()
}

func (p *Process) doneChan() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Pid is the process id, also the id of its process group.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	done := p.doneChan()
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process group, and SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	if exited, _ := p.Exited(); exited {
		return
	}
	done := p.doneChan()
	_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		<-done
	}
}

// Tail returns the last n lines of the process log.
func (p *Process) Tail(n int) string { return TailFile(p.LogPath, 0, n) }

// LogSize is the current length of the log, a mark for TailFile.
func (p *Process) LogSize() int64 {
	fi, err := os.Stat(p.LogPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// TailFile returns at most the last n lines written to path after byte
// offset from.
func TailFile(path string, from int64, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = append([][]byte{[]byte(fmt.Sprintf("... (%d earlier lines in %s)", len(lines)-n, path))}, lines[len(lines)-n:]...)
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// errExited is returned by waits that notice their process died.
var errExited = errors.New("process exited")

func (p *Process) exitedErr() error {
	if exited, err := p.Exited(); exited {
		return fmt.Errorf("%s %w (%v); last lines of %s:\n%s", p.Name, errExited, err, p.LogPath, p.Tail(30)) //nolint:errorlint // err is nil after a clean exit, which %v prints as <nil>
	}
	return nil
}

// retryPortClash runs start up to three times while it fails because a port
// FreePort handed out was taken by someone else before the process bound it.
func retryPortClash(start func() error) error {
	var err error
	for range 3 {
		if err = start(); err == nil || !errors.Is(err, errExited) || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
	}
	return err
}
