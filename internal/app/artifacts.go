package app

import (
	"context"

	"github.com/taskpull/taskd/artifact"
)

// artifactConfig is the artifact storage the settings describe.
func (c Config) artifactConfig() artifact.Config {
	return artifact.Config{Dir: c.ArtifactDir, MaxBytes: c.ArtifactMaxBytes, S3: artifact.S3Config{
		Endpoint: c.ArtifactS3Endpoint, Bucket: c.ArtifactS3Bucket, AccessKey: c.ArtifactS3AccessKey,
		SecretKey: c.ArtifactS3SecretKey, Region: c.ArtifactS3Region, Insecure: c.ArtifactS3Insecure,
		URLExpiry: c.ArtifactS3URLExpiry, PartSize: c.ArtifactS3PartSize}}
}

// PrepareArtifacts readies the artifact storage at start: it makes the directory, or
// finds the bucket. A directory or a bucket the settings name that cannot be used stops
// the start. The default directory that cannot be made (a working directory the server
// may not write, as in a container) is a warning instead: the server runs, and artifact
// uploads answer 503 until DISPATCH_ARTIFACT_DIR names a directory it can write.
func (a *App) PrepareArtifacts(ctx context.Context) error {
	err := a.Artifacts.Prepare(ctx)
	if err != nil && a.cfg.ArtifactS3Endpoint == "" && a.cfg.Source("DISPATCH_ARTIFACT_DIR") == "default" {
		a.deps.Log.Warn("artifact uploads will fail until DISPATCH_ARTIFACT_DIR names a directory this server can write",
			"component", "artifact", "dir", a.Artifacts.Where(), "err", err)
		return nil
	}
	return err
}
