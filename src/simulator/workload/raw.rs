//! The serde shapes of a workload file. Every struct denies unknown
//! fields, so a typo is an error rather than ignored.

use super::*;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Workload {
    pub name: Option<String>,
    pub description: Option<String>,
    pub duration: Dur,
    pub seed: Option<u64>,
    pub server: Option<Server>,
    pub backend: Option<Backend>,
    pub sample_interval: Option<Dur>,
    pub served_fraction: Option<f64>,
    pub flows: Vec<Flow>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Server {
    pub concurrency_limit: Option<u32>,
    pub service_time_guess: Option<Dur>,
    pub wait_limit: Option<Dur>,
    pub borrowing_period: Option<Dur>,
    pub adaptive: Option<Adaptive>,
}

/// `adaptive: {}` turns the adaptive limit on with its defaults.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Adaptive {
    pub min_limit: Option<u32>,
    pub max_limit: Option<u32>,
    pub update_interval: Option<Dur>,
    pub tolerance_percent: Option<u32>,
    pub smoothing_percent: Option<u32>,
    pub gain: Option<u32>,
    pub min_window_samples: Option<u32>,
    pub probe_interval: Option<Dur>,
    pub probe_limit: Option<u32>,
    pub probe_samples: Option<u32>,
    pub probe_timeout: Option<Dur>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Backend {
    pub capacity: u32,
    pub overload: Option<f64>,
    #[serde(default)]
    pub phases: Vec<BackendPhaseRaw>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendPhaseRaw {
    pub at: Dur,
    pub capacity: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Flow {
    pub name: String,
    pub replicas: Option<u32>,
    pub user: String,
    pub groups: Option<Vec<String>>,
    pub verb: Option<String>,
    pub non_resource: Option<bool>,
    pub api_group: Option<String>,
    pub resource: Option<String>,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    /// The object's name (`name` is the flow's).
    pub object_name: Option<String>,
    pub path: Option<String>,
    pub rate: Option<f64>,
    pub clients: Option<u32>,
    pub think: Option<Dur>,
    pub retry_after: Option<Dur>,
    pub service: Option<Service>,
    pub seats: Option<Seats>,
    pub additional_latency: Option<Dur>,
    pub release_seats_after: Option<Dur>,
    pub actual_seats: Option<f64>,
    pub timeout: Option<Dur>,
    pub phases: Option<Vec<PhaseRaw>>,
    #[serde(default)]
    pub bursts: Vec<BurstRaw>,
    pub expect: Option<Expect>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseRaw {
    pub at: Dur,
    pub scale: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BurstRaw {
    pub at: Dur,
    pub requests: u32,
    pub over: Option<Dur>,
}

/// `seats: 3` or `seats: {initial: 1, final: 4}`.
pub enum Seats {
    Count(u32),
    Split {
        initial: Option<u32>,
        r#final: Option<u32>,
    },
}

impl Default for Seats {
    fn default() -> Self {
        Seats::Count(1)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SeatsMap {
    initial: Option<u32>,
    r#final: Option<u32>,
}

impl<'de> Deserialize<'de> for Seats {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Seats;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a seat count or {initial, final}")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Seats, E> {
                u32::try_from(v)
                    .map(Seats::Count)
                    .map_err(|_| E::custom("seat count out of range"))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Seats, E> {
                u32::try_from(v)
                    .map(Seats::Count)
                    .map_err(|_| E::custom("seat count out of range"))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Seats, A::Error> {
                let m = SeatsMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(Seats::Split {
                    initial: m.initial,
                    r#final: m.r#final,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// `service: 20ms` (constant) or one distribution.
pub struct Service(pub ServiceTime);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
enum ServiceMap {
    Constant(Dur),
    Uniform { min: Dur, max: Dur },
    Exponential { mean: Dur },
    Lognormal { median: Dur, sigma: f64 },
}

impl<'de> Deserialize<'de> for Service {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Service;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a duration, or one of {constant}, {uniform}, {exponential}, {lognormal}",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Service, E> {
                parse_duration(v)
                    .map(|d| Service(ServiceTime::Constant(d)))
                    .map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Service, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Service, A::Error> {
                let m = ServiceMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(Service(match m {
                    ServiceMap::Constant(d) => ServiceTime::Constant(d.0),
                    ServiceMap::Uniform { min, max } => ServiceTime::Uniform {
                        min: min.0,
                        max: max.0,
                    },
                    ServiceMap::Exponential { mean } => ServiceTime::Exponential { mean: mean.0 },
                    ServiceMap::Lognormal { median, sigma } => ServiceTime::Lognormal {
                        median: median.0,
                        sigma,
                    },
                }))
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration written with a unit.
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as 250ms, 1.5s or 2m")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map(Dur).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                self.visit_str(&v.to_string())
            }
        }
        d.deserialize_any(V)
    }
}

/// `expect: served` or `expect: {served: 0.9, waitP99: 200ms}`.
pub enum Expect {
    Word(String),
    Bounds {
        served: Option<f64>,
        wait_p99: Option<Dur>,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExpectMap {
    served: Option<f64>,
    wait_p99: Option<Dur>,
}

impl<'de> Deserialize<'de> for Expect {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Expect;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("`served` or {served: FRACTION, waitP99: DURATION}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Expect, E> {
                Ok(Expect::Word(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Expect, A::Error> {
                let m = ExpectMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(Expect::Bounds {
                    served: m.served,
                    wait_p99: m.wait_p99,
                })
            }
        }
        d.deserialize_any(V)
    }
}
