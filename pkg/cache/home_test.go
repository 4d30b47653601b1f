package cache

import (
	"os/user"
	"path/filepath"
	"testing"
)

// TestDockerConfigWithoutHOME: cloud-init's runcmd and a systemd service without User= run
// with no HOME; the docker config is then the user's (root's /root/.docker/config.json, as
// docker itself finds it), not .docker/config.json in whatever folder the process is in.
func TestDockerConfigWithoutHOME(t *testing.T) {
	t.Setenv("HOME", "")
	u, err := user.Current()
	if err != nil || u.HomeDir == "" {
		t.Skipf("no home folder for this user: %v", err)
	}
	got := dockerConfigPath(func(string) string { return "" })
	if want := filepath.Join(u.HomeDir, ".docker", "config.json"); got != want {
		t.Errorf("docker config without HOME: %q, want %q", got, want)
	}
	if got := dockerConfigPath(func(k string) string { return map[string]string{"DOCKER_CONFIG": "/etc/fleet"}[k] }); got != "/etc/fleet/config.json" {
		t.Errorf("with DOCKER_CONFIG: %q", got)
	}
}
