//! Pods listed page by page straight from the API server, as upstream lists them uncached
//! (docs/restart.md): no cluster-wide pod cache, one page of `limits.pageSize` pods in
//! memory at a time, `status.phase=Running` and the policy's pod selector filtered by the API
//! server.
//!
//! A continue token can expire while a large cluster is paged (upstream #1902): the API server
//! then answers 410 Gone, with a token that continues the list from where it stopped when it
//! can (an inconsistent continuation, as `kubectl` does); otherwise the list starts over once.
//! Starting over is safe: targets are restarted once per reconcile and pods already restarted
//! carry the desired state's hash.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kube::core::Selector;

/// How often an expired list may start over from the beginning in one pass.
pub const MAX_RESTARTS: usize = 2;

/// A page-by-page list of running pods.
pub struct PodPager {
    api: Api<Pod>,
    params: ListParams,
    token: Option<String>,
    done: bool,
    restarts: usize,
    pages: usize,
}

impl PodPager {
    /// Pages of at most `page_size` running pods matching `selector`, from `api` (all
    /// namespaces, or the watched one).
    pub fn new(api: Api<Pod>, selector: &Selector, page_size: u32) -> Self {
        let params = ListParams::default()
            .fields("status.phase=Running")
            .labels_from(selector)
            .limit(page_size.max(1));
        Self {
            api,
            params,
            token: None,
            done: false,
            restarts: 0,
            pages: 0,
        }
    }

    /// Pages fetched so far.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// Times the list started over after an expired continue token.
    pub fn restarts(&self) -> usize {
        self.restarts
    }

    /// The next page, `None` after the last one. Managed fields are dropped (nobody reads them
    /// and they are a large part of a pod's JSON).
    ///
    /// # Errors
    /// The API server's error, or a token that expired more than [`MAX_RESTARTS`] times.
    pub async fn next_page(&mut self) -> Result<Option<Vec<Pod>>, kube::Error> {
        if self.done {
            return Ok(None);
        }
        loop {
            let params = match &self.token {
                Some(t) => self.params.clone().continue_token(t),
                None => self.params.clone(),
            };
            match self.api.list(&params).await {
                Ok(list) => {
                    self.pages += 1;
                    self.token = list.metadata.continue_.filter(|t| !t.is_empty());
                    self.done = self.token.is_none();
                    let mut pods = list.items;
                    for p in &mut pods {
                        p.metadata.managed_fields = None;
                    }
                    return Ok(Some(pods));
                }
                Err(kube::Error::Api(s)) if s.code == 410 && self.token.is_some() => {
                    let fresh = s
                        .metadata
                        .as_ref()
                        .and_then(|m| m.continue_.clone())
                        .filter(|t| !t.is_empty());
                    if fresh.is_some() {
                        tracing::info!(
                            "pod list continue token expired: continuing from where it stopped"
                        );
                        self.token = fresh;
                    } else if self.restarts < MAX_RESTARTS {
                        self.restarts += 1;
                        tracing::info!(
                            restarts = self.restarts,
                            "pod list continue token expired: listing from the start"
                        );
                        self.token = None;
                    } else {
                        return Err(kube::Error::Api(s));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The JSON array of `pods` the plugin receives (one page, in list order).
///
/// # Errors
/// Serialization failure (not expected for API objects).
pub fn page_json(pods: &[&Pod]) -> Result<String, serde_json::Error> {
    serde_json::to_string(pods)
}
