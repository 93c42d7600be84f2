package composecheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// published are secret values the repository has shipped as defaults or
// placeholders; serve refuses them, so no file may offer them again.
var published = []string{
	"change-me", "dev-admin-token", "dev-payment-token",
	"dev-jwt-secret-change-me-0123456789", "load-test-jwt-secret-not-for-production",
}

// No deployment file (compose, .env.example, the Makefile, the k8s base and
// overlays, nginx) carries a published secret.
func TestNoPublishedSecrets(t *testing.T) {
	files := []string{composeFile, filepath.Join(root, ".env.example"), filepath.Join(root, "Makefile"), filepath.Join(root, "loadtest", "nginx.conf")}
	err := filepath.WalkDir(k8sDir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && path != k8sSecretsFile {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f) //nolint:gosec // G304: the repository's own files
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range published {
			if strings.Contains(string(b), s) {
				t.Errorf("%s contains %q, a published secret; want the secrets generated (make .env, make k8s-secrets)", f, s)
			}
		}
	}
}

// docker compose refuses to start without the secrets (no default to fall
// back on), and its error says how to make them.
func TestComposeSecretsRequired(t *testing.T) {
	for _, missing := range composeSecrets {
		env := map[string]string{}
		for _, k := range composeSecrets {
			if k != missing {
				env[k] = randomSecret(t)
			}
		}
		_, err := loadComposeFile(env, "loadtest")
		if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "make .env") {
			t.Errorf("docker compose with %s unset: %v; want an error naming it and `make .env`", missing, err)
		}
	}
}
