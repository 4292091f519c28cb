//! The AMQP 0-9-1 sink (RabbitMQ): each event is published to the sink's
//! exchange as a persistent message (delivery mode 2) with the routing key
//! made from the sink's template (`pcrf.{name}`), on a channel in confirm
//! mode; the event counts as delivered only when the broker confirms
//! (basic.ack) it. A failed connection or channel is dropped and made again
//! on the next attempt, so a broker restart costs retries, not events.

use super::config::SinkConfig;
use super::event::Event;
use super::sink::{Delivery, Sink, SinkError};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::publisher_confirm::Confirmation;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

/// A RabbitMQ (AMQP 0-9-1) receiver.
pub struct Amqp {
    url: String,
    exchange: String,
    kind: ExchangeKind,
    declare: bool,
    routing_key: String,
    timeout: std::time::Duration,
    /// The open connection and its confirm-mode channel; `None` after a
    /// failure (made again on the next attempt).
    open: tokio::sync::Mutex<Option<(Connection, Channel)>>,
}

fn fail(what: &str, e: impl std::fmt::Display) -> SinkError {
    SinkError(format!("AMQP {what}: {e}"))
}

impl Amqp {
    pub fn new(cfg: &SinkConfig) -> Amqp {
        let kind = match cfg.exchange_type.as_str() {
            "direct" => ExchangeKind::Direct,
            "fanout" => ExchangeKind::Fanout,
            "headers" => ExchangeKind::Headers,
            _ => ExchangeKind::Topic,
        };
        Amqp {
            url: cfg.url.clone(),
            exchange: cfg.exchange.clone(),
            kind,
            // The default exchange ("") cannot be declared.
            declare: cfg.declare_exchange && !cfg.exchange.is_empty(),
            routing_key: cfg.routing_key.clone(),
            timeout: cfg.timeout(),
            open: tokio::sync::Mutex::new(None),
        }
    }

    /// The routing key of an event.
    pub fn routing_key(&self, event: &Event) -> String {
        self.routing_key.replace("{name}", &event.name)
    }

    /// The confirm-mode channel, connecting first when there is none.
    async fn channel(&self) -> Result<Channel, SinkError> {
        let mut open = self.open.lock().await;
        if let Some((conn, ch)) = open.as_ref() {
            if conn.status().connected() && ch.status().connected() {
                return Ok(ch.clone());
            }
        }
        *open = None;
        let conn = Connection::connect(&self.url, ConnectionProperties::default())
            .await
            .map_err(|e| fail("connect", e))?;
        let ch = conn
            .create_channel()
            .await
            .map_err(|e| fail("channel", e))?;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| fail("confirm.select", e))?;
        if self.declare {
            ch.exchange_declare(
                &self.exchange,
                self.kind.clone(),
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| fail("exchange.declare", e))?;
        }
        tracing::info!(exchange = %self.exchange, "AMQP notification sink connected");
        *open = Some((conn, ch.clone()));
        Ok(ch)
    }

    async fn publish(&self, event: &Event) -> Result<(), SinkError> {
        let ch = self.channel().await?;
        let props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_message_id(event.id().into())
            .with_type(event.name.as_str().into());
        let confirm = ch
            .basic_publish(
                &self.exchange,
                &self.routing_key(event),
                BasicPublishOptions::default(),
                &event.body,
                props,
            )
            .await
            .map_err(|e| fail("publish", e))?
            .await
            .map_err(|e| fail("confirm", e))?;
        match confirm {
            Confirmation::Ack(_) => Ok(()),
            Confirmation::Nack(_) => Err(SinkError(
                "AMQP: the broker refused (nack) the message".into(),
            )),
            Confirmation::NotRequested => {
                Err(SinkError("AMQP: the channel is not in confirm mode".into()))
            }
        }
    }
}

impl Sink for Amqp {
    fn deliver<'a>(&'a self, event: &'a Event) -> Delivery<'a> {
        Box::pin(async move {
            let out = match tokio::time::timeout(self.timeout, self.publish(event)).await {
                Ok(out) => out,
                Err(_) => Err(SinkError(format!(
                    "AMQP: no confirm within {} ms",
                    self.timeout.as_millis()
                ))),
            };
            if out.is_err() {
                // Whatever failed, the next attempt starts on a new
                // connection; the old one is closed without waiting on it.
                if let Some((conn, _)) = self.open.lock().await.take() {
                    tokio::spawn(async move {
                        let close = conn.close(320, "pcrf: reconnecting");
                        let _ =
                            tokio::time::timeout(std::time::Duration::from_secs(1), close).await;
                    });
                }
            }
            out
        })
    }
}
