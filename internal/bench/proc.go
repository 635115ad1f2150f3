package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture Go runs on (sysconf(_SC_CLK_TCK) needs cgo).
const clockTicks = 100

// statCPU parses the contents of /proc/<pid>/stat and returns the
// process's user and system CPU time (fields 14 and 15). The command name
// (field 2) is in parentheses and may hold spaces and parentheses itself,
// so the fields are counted from the last ')'.
func statCPU(stat []byte) (cpuTime, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return cpuTime{}, errors.New("/proc stat: no ')' after the command name")
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 13 {
		return cpuTime{}, fmt.Errorf("/proc stat: %d fields after the command name, want at least 13", len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return cpuTime{}, fmt.Errorf("/proc stat: %w", err)
	}
	tick := time.Second / clockTicks
	return cpuTime{user: time.Duration(utime) * tick, sys: time.Duration(stime) * tick}, nil
}

// pidCPU is the CPU time process pid has used so far, from /proc.
func pidCPU(pid int) (cpuTime, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return cpuTime{}, err
	}
	return statCPU(b)
}

// listenInodes parses a /proc/net/tcp or tcp6 table and returns the socket
// inodes in state LISTEN (0A) on port.
func listenInodes(r io.Reader, port int) ([]uint64, error) {
	var out []uint64
	sc := bufio.NewScanner(r)
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "0A" {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil || int(p) != port {
			continue
		}
		ino, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil || ino == 0 {
			continue
		}
		out = append(out, ino)
	}
	return out, sc.Err()
}

// listenerPID finds the process of this host listening on TCP port: the
// socket inodes of /proc/net/tcp{,6}, then the process holding one of them
// among its file descriptors. It needs to read other processes' fd
// directories (root, or the same user as the server).
func listenerPID(port int) (int, error) {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		ids, err := listenInodes(f, port)
		f.Close()
		if err != nil {
			return 0, err
		}
		for _, id := range ids {
			inodes[fmt.Sprintf("socket:[%d]", id)] = true
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("not on this host: no process here listens on port %d", port)
	}
	procs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	for _, dir := range procs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(dir + "/fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if link, err := os.Readlink(dir + "/fd/" + fd.Name()); err == nil && inodes[link] {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("port %d is listened on, but no readable process holds the socket (not root?)", port)
}

// localPID returns the pid of the server at addr (host:port) when it runs
// on this host, and why not otherwise.
func localPID(addr string) (int, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return 0, fmt.Errorf("port of %s: %w", addr, err)
	}
	if !isLocalHost(host) {
		return 0, fmt.Errorf("%s is not on this host", addr)
	}
	return listenerPID(port)
}

// isLocalHost reports whether host names this machine: a loopback address,
// or an address of one of its interfaces.
func isLocalHost(host string) bool {
	if host == "" || host == "localhost" {
		return true
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return false
	}
	ifaddrs, _ := net.InterfaceAddrs()
	for _, ip := range ips {
		if ip.IsLoopback() || ip.IsUnspecified() {
			return true
		}
		for _, a := range ifaddrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}
