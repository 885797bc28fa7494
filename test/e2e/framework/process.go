package framework

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Process is a child process in its own process group, with stdout and
// stderr appended to one log file.
type Process struct {
	Name    string
	LogPath string
	Args    []string

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
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	defer logFile.Close() // the child holds its own descriptor
	fmt.Fprintf(logFile, "### %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "))

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Dir = o.Dir
	cmd.Env = append(os.Environ(), o.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !o.Detach {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, Args: argv, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id, also the id of its process group.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
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
	_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		<-p.done
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
		return fmt.Errorf("%s %w (%v); last lines of %s:\n%s", p.Name, errExited, err, p.LogPath, p.Tail(30))
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
