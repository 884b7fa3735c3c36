package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// A Walk is what one request ran: the files, in order of their paths, and
// its HTTP status.
type Walk struct {
	Files  []File
	Status int
}

// File is one file of the walk and the functions the request ran in it.
type File struct {
	Name  string // relative to the module's root: "core/decide.go"
	Funcs []string
}

const module = "github.com/redlimit/redlimit/"

// walk builds this command with coverage, runs it to serve the request,
// and reads which functions of which files ran.
func walk(deny bool) (Walk, error) {
	tmp, err := os.MkdirTemp("", "redlimit-walk")
	if err != nil {
		return Walk{}, err
	}
	defer os.RemoveAll(tmp)
	bin, covdir := filepath.Join(tmp, "walk"), filepath.Join(tmp, "cover")
	if err := os.Mkdir(covdir, 0o755); err != nil {
		return Walk{}, err
	}
	if _, err := run("", "go", "build", "-cover", "-covermode=atomic", "-coverpkg="+module+"...",
		"-o", bin, module+"internal/cmd/walk"); err != nil {
		return Walk{}, err
	}
	args := []string{}
	if deny {
		args = append(args, "-deny")
	}
	out, err := run(serveEnv+"=1 GOCOVERDIR="+covdir, bin, args...)
	if err != nil {
		return Walk{}, err
	}
	status, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return Walk{}, fmt.Errorf("the request's status: %q", out)
	}
	profile := filepath.Join(tmp, "cover.txt")
	if _, err := run("", "go", "tool", "covdata", "textfmt", "-i", covdir, "-o", profile); err != nil {
		return Walk{}, err
	}
	funcs, err := run("", "go", "tool", "cover", "-func", profile)
	if err != nil {
		return Walk{}, err
	}
	return Walk{Files: ran(funcs), Status: status}, nil
}

// ran reads go tool cover -func's lines ("path/file.go:12:\tName\t50.0%")
// into the files and functions that ran (more than 0.0%), this command's
// own left out.
func ran(report string) []File {
	byFile := map[string][]string{}
	for _, line := range strings.Split(report, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] == "0.0%" || !strings.HasPrefix(f[0], module) {
			continue
		}
		name := strings.TrimPrefix(f[0], module)
		name = name[:strings.IndexByte(name, ':')]
		if strings.HasPrefix(name, "internal/cmd/walk/") {
			continue
		}
		byFile[name] = append(byFile[name], f[1])
	}
	files := make([]File, 0, len(byFile))
	for name, fns := range byFile {
		files = append(files, File{Name: name, Funcs: fns})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	return files
}

// run runs a command (with env, "K=V K=V", added to the environment) and
// returns its standard output.
func run(env, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), strings.Fields(env)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}
