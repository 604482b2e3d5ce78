//! `sandboxd image`: the default sandbox image, built from its recipe
//! unless present (`serve` and the first command do the same), and its
//! reference.

use std::process::ExitCode;

use clap::Subcommand;
use sandboxd::sandbox::docker::DockerRuntime;

use super::AnyError;

// The verbs of `sandboxd image`.
#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Build the default image from images/default/build.sh unless present.
    Build {
        /// Docker daemon address (default: DOCKER_HOST or the local socket).
        #[arg(long, env = "SANDBOXD_DOCKER_HOST")]
        docker_host: Option<String>,
    },
    /// Print the default image reference.
    Name,
}

/// Runs one `image` verb.
pub async fn run(command: ImageCommand) -> Result<ExitCode, AnyError> {
    match command {
        ImageCommand::Build { docker_host } => build_image(docker_host).await,
        ImageCommand::Name => {
            println!("{}", sandboxd::sandbox::image::default_image());
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn build_image(docker_host: Option<String>) -> Result<ExitCode, AnyError> {
    let docker = DockerRuntime::new(docker_host);
    let image = sandboxd::sandbox::image::default_image();
    eprintln!("building {image} if missing (about a minute the first time)...");
    let built = docker.build_default_image().await?;
    println!(
        "{image} {}",
        if built { "built" } else { "already present" }
    );
    Ok(ExitCode::SUCCESS)
}
