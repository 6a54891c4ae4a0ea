/*
 * errors.c -- names and texts of the MS_E* codes.
 */
#include "../moonshard.h"

struct row {
    int code;
    const char *name;
    const char *text;
};

static const struct row rows[] = {
    {MS_ETIMEDOUT, "timeout", "the ask timed out"},
    {MS_ECANCELED, "cancelled", "cancelled: the node is stopping"},
    {MS_EINVAL, "invalid", "invalid argument"},
    {MS_E2BIG, "too_large", "id or message above its size limit"},
    {MS_ENOMEM, "no_memory", "out of memory"},
    {MS_EBUSY, "busy", "already under way"},
    {MS_EOVERFLOW, "overflow", "the shard's mailbox is full"},
    {MS_ENOTYPE, "unknown_type", "unknown entity type"},
    {MS_EHANDLER, "handler_error", "the entity's handler raised an error"},
    {MS_ENOREPLY, "no_reply", "the handler finished without replying"},
    {MS_EBADJSON, "bad_json", "the message is not valid JSON"},
    {MS_ENOTTABLE, "not_object", "the message is not a JSON object"},
    {MS_EUNAVAIL, "unavailable",
     "the entity type's behavior module failed to load"},
    {MS_ESELF, "ask_self", "an entity cannot ask itself (deadlock)"},
    {MS_ECONFIG, "config", "configuration error"},
    {MS_EPARTITION, "partitioner", "the entity type's partitioner failed"},
};

static const struct row *find(int err)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].code == err)
            return &rows[i];
    return NULL;
}

const char *ms_strerror(int err)
{
    const struct row *r = find(err);
    return r ? r->text : uv_strerror(err);
}

const char *ms_errname(int err)
{
    const struct row *r = find(err);
    return r ? r->name : "error";
}
