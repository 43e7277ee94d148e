//! Topic ids (KIP-516): a topic deleted and created again under the same name gets a new
//! id. sluice stores the id beside each offset; an assignment whose stored id differs from
//! the topic's id now is a log that the stored offsets are not positions in, however its
//! offsets happen to line up (`delivery.on_offset_out_of_range` decides).
//!
//! The rdkafka crate has no call for them; librdkafka's DescribeTopics admin request (2.3
//! and later; the crate bundles 2.12) answers them, through its C API on the task's own
//! client.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};
use rdkafka::types::RDKafkaRespErr;

/// The id librdkafka reports for a topic without one (a broker older than KIP-516).
const NO_ID: &str = "AAAAAAAAAAAAAAAAAAAAAA";

/// The ids of `topics` (base64, as Kafka's tools print them) that the cluster reports;
/// topics without one (an older broker, a topic that does not exist) are absent. `Err`
/// says why the cluster could not be asked.
pub fn topic_ids<C: ClientContext>(
    client: &Client<C>,
    topics: &[String],
    timeout: Duration,
) -> Result<HashMap<String, String>, String> {
    if topics.is_empty() {
        return Ok(HashMap::new());
    }
    let names: Vec<CString> = topics
        .iter()
        .map(|t| CString::new(t.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|_| "a topic name holds a NUL character".to_string())?;
    let mut pointers: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let rk = client.native_ptr();
    // SAFETY: every object is created here from the live client handle `rk`, used while
    // alive, and destroyed once, after the last use; `names` outlives the collection that
    // points into it (librdkafka copies the names); strings librdkafka returns are read
    // before the event that owns them is destroyed.
    unsafe {
        let collection =
            rd::rd_kafka_TopicCollection_of_topic_names(pointers.as_mut_ptr(), pointers.len());
        let options = rd::rd_kafka_AdminOptions_new(
            rk,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
        );
        let mut errstr = [0 as c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(
            options,
            timeout_ms,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        let queue = rd::rd_kafka_queue_new(rk);
        rd::rd_kafka_DescribeTopics(rk, collection, options, queue);
        let event = rd::rd_kafka_queue_poll(queue, timeout_ms.saturating_add(1000));
        let answer = read_answer(event);
        if !event.is_null() {
            rd::rd_kafka_event_destroy(event);
        }
        rd::rd_kafka_queue_destroy(queue);
        rd::rd_kafka_AdminOptions_destroy(options);
        rd::rd_kafka_TopicCollection_destroy(collection);
        answer
    }
}

/// # Safety
/// `event` is null or a live DescribeTopics result event.
unsafe fn read_answer(event: *mut rd::rd_kafka_event_t) -> Result<HashMap<String, String>, String> {
    let text = |p: *const c_char| {
        if p.is_null() {
            None
        } else {
            // SAFETY: a NUL-terminated string owned by the event, alive here.
            Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        }
    };
    if event.is_null() {
        return Err("no answer to DescribeTopics in time".into());
    }
    // SAFETY: (for this block) `event` is a live event; the pointers read from it belong
    // to it and are used before it is destroyed by the caller.
    unsafe {
        if rd::rd_kafka_event_error(event) != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(text(rd::rd_kafka_event_error_string(event))
                .unwrap_or_else(|| "DescribeTopics failed".into()));
        }
        let result = rd::rd_kafka_event_DescribeTopics_result(event);
        if result.is_null() {
            return Err("the answer was not a DescribeTopics result".into());
        }
        let mut count = 0usize;
        let descriptions = rd::rd_kafka_DescribeTopics_result_topics(result, &mut count);
        let mut ids = HashMap::new();
        for i in 0..count {
            let description = *descriptions.add(i);
            let error = rd::rd_kafka_TopicDescription_error(description);
            if !error.is_null()
                && rd::rd_kafka_error_code(error) != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR
            {
                continue;
            }
            let id = rd::rd_kafka_TopicDescription_topic_id(description);
            if id.is_null() {
                continue;
            }
            let (Some(name), Some(id)) = (
                text(rd::rd_kafka_TopicDescription_name(description)),
                text(rd::rd_kafka_Uuid_base64str(id)),
            ) else {
                continue;
            };
            if id != NO_ID {
                ids.insert(name, id);
            }
        }
        Ok(ids)
    }
}
