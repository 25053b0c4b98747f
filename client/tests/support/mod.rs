//! Starts a real broker server in-process on `127.0.0.1:0` for client tests.

#![allow(dead_code)]

use std::path::Path;

use broker::{BrokerConfig, Server};
use client::{CommonConfig, ConsumerConfig, ProducerConfig};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running broker; `stop` shuts it down cleanly.
pub struct TestBroker {
    pub address: String,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl TestBroker {
    pub async fn start(data_dir: &Path) -> TestBroker {
        TestBroker::start_with(data_dir, |_| {}).await
    }

    pub async fn start_with(data_dir: &Path, tweak: impl FnOnce(&mut BrokerConfig)) -> TestBroker {
        let mut config = BrokerConfig {
            data_dir: data_dir.to_path_buf(),
            listen: "127.0.0.1:0".to_owned(),
            ..BrokerConfig::default()
        };
        tweak(&mut config);
        let server = Server::bind(config).await.expect("broker starts");
        let address = server.local_addr().to_string();
        let (shutdown, stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            server
                .serve(async {
                    let _ = stopped.await;
                })
                .await
                .expect("broker serves");
        });
        TestBroker { address, shutdown: Some(shutdown), task: Some(task) }
    }

    pub async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("broker task ends");
        }
    }

    pub fn common(&self) -> CommonConfig {
        CommonConfig { bootstrap_servers: self.address.clone(), ..CommonConfig::default() }
    }

    pub fn producer_config(&self) -> ProducerConfig {
        ProducerConfig { common: self.common(), ..ProducerConfig::default() }
    }

    pub fn consumer_config(&self) -> ConsumerConfig {
        ConsumerConfig { common: self.common(), ..ConsumerConfig::default() }
    }
}
